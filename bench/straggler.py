"""The straggler rule on real runs: healthy, slowed, heavier shard, skipped collective.

Runs ``%%dist_train`` on 2 CPU ranks (notebook 9's MLP, 64 samples a step, 60 steps)
with no load and under two CPU hogs, and for every run prints what the product says
(``load_run(name).summaries()``: others_wait, the share of the steps in which the others
waited for the rank, others_wait as a share of the step, the flag)
next to what the ranks measured themselves with their clocks (the same machine, so one
clock): each step's arrival at the gradient all-reduce (the last gradient hook, DDP's one
bucket launch), the skew between the ranks and each rank's own work outside it. Also
the rule over every 20-record window of the run (what the live view showed as it went):
the largest share of steps waited for, and of ``others_wait / step``, of each rank.

    .venv/bin/python bench/straggler.py [--reps 3] [--hogs 0 2]

Kinds of run: ``healthy`` (identical ranks), ``sleep`` (rank 1 sleeps 30 ms a step),
``shard`` (rank 1's batch is 4 x the others': a heavier shard), ``skip`` (no DDP: the
gradient averaged by a ``dist.all_reduce`` each step, which rank 0 skips at step 30; the
cluster names it in a CollectiveMismatch. The collective watch counts the Python
``torch.distributed`` calls, not DDP's C++ all-reduce: a rank that leaves a DDP loop
early is found by gloo's 30 s timeout instead).
Writes bench/results/straggler.json.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from common import cpu_hogs, machine, quietly, shell, use_scratch_store, write_result

DEFINE = r"""
import time, torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from dist_notebook import report

def bench_run(steps, kind):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    if kind != "skip":
        model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    batch = 256 if (kind == "shard" and rank == 1) else 64
    data = [(torch.randn(batch, 256, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(8)]
    ready = [0.0]
    def hook(p):
        ready[0] = max(ready[0], time.monotonic())
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(hook)
    times = []
    for step in range(steps):
        if kind == "sleep" and rank == 1:
            time.sleep(0.03)
        x, y = data[step % len(data)]
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        ready[0] = 0.0
        loss.backward()
        if kind == "skip" and not (rank == 0 and step == steps // 2):
            # the gradient averaged by hand; rank 0 skips it once (the bug)
            flat = torch.cat([p.grad.flatten() for p in model.parameters()])
            dist.all_reduce(flat)
        left = time.monotonic()
        opt.step()
        report(step=step, loss=loss.item(), samples=64)
        times.append((ready[0], left))
    return times
"""

STEPS = 60


def window_extremes(records: list[Any]) -> dict[int, dict[str, float]]:
    """The rule over every 20-record window: per rank, the largest share of steps waited
    for and of the step, and in how many windows it was flagged."""
    from dist_notebook import protocol

    by_rank: dict[int, list[Any]] = {}
    for r in records:
        by_rank.setdefault(r.rank, []).append(r)
    n = min(len(v) for v in by_rank.values())
    out = {
        rank: {"min_waited": 1.0, "max_waited": 0.0, "max_share": float("-inf"), "flagged": 0}
        for rank in by_rank
    }
    for end in range(protocol.WINDOW + 1, n + 1):
        summaries = [
            protocol.summarize_rank(
                rank, recs[end - protocol.WINDOW : end], records=end, first_step=0,
                last_step=end - 1, last_loss=None,
            )
            for rank, recs in sorted(by_rank.items())
        ]  # fmt: skip
        protocol.mark_stragglers(summaries)
        for s in summaries:
            if s.others_wait is None or s.waited_for_share is None or not s.step_time:
                continue
            o = out[s.rank]
            o["max_waited"] = max(o["max_waited"], s.waited_for_share)
            o["min_waited"] = min(o["min_waited"], s.waited_for_share)
            o["max_share"] = max(o["max_share"], s.others_wait / s.step_time)
            o["flagged"] += s.straggler
    return out


def one_run(ip: Any, name: str, kind: str) -> dict[str, Any]:
    import os

    import dist_notebook
    from dist_notebook.cluster.onranks.mismatch import CollectiveMismatch

    mismatch = None
    try:
        quietly(
            ip.run_cell_magic,
            "dist_train",
            f"--name {name} --steps {STEPS} --timeout 60 --no-dashboard",
            f"times = bench_run({STEPS}, {kind!r})",
        )
    except CollectiveMismatch as e:
        mismatch = str(e)
    run = dist_notebook.load_run(name)
    summaries = run.summaries()
    row: dict[str, Any] = {"name": name, "kind": kind, "load": os.getloadavg()[0]}
    row["mismatch"] = mismatch
    row["flagged"] = [s.rank for s in summaries if s.straggler]
    row["ranks"] = [
        {
            "rank": s.rank,
            "step_ms": None if s.step_time is None else 1e3 * s.step_time,
            "others_wait_ms": None if s.others_wait is None else 1e3 * s.others_wait,
            "share": s.others_wait / s.step_time if s.others_wait is not None else None,
            "waited_for": s.waited_for_share,
        }
        for s in summaries
    ]  # fmt: skip
    records = run.records()
    row["windows"] = window_extremes(records)
    # (rank, step, step_time, comm_time) of every record: to try other rules on the same runs
    row["records"] = [(r.rank, r.step, r.step_time, r.comm_time) for r in records]
    if mismatch is None:
        times = quietly(ip.run_line_magic, "dist_pull", "times --all")[0]
        skew = [1e3 * (b[0] - a[0]) for a, b in zip(times[0][5:], times[1][5:], strict=False)]
        own = {
            r: statistics.median(
                1e3 * (t[i + 1][0] - t[i][1]) for i in range(5, len(t) - 1)
            )
            for r, t in times.items()
        }  # fmt: skip
        q = statistics.quantiles(skew, n=10)
        row["arrival_skew_ms"] = {"median": statistics.median(skew), "p10": q[0], "p90": q[-1]}
        row["own_work_ms"] = own
    return row


def describe(row: dict[str, Any]) -> str:
    ranks = " ".join(
        f"r{r['rank']} wait {r['others_wait_ms']:6.1f} ms ({r['share']:5.2f} of step, "
        f"in {r['waited_for']:4.2f} of steps)"
        for r in row["ranks"]
        if r["others_wait_ms"] is not None
    )
    win = " ".join(
        f"r{k} waited {v['min_waited']:4.2f}-{v['max_waited']:4.2f} share max {v['max_share']:5.2f}"
        f" flagged in {v['flagged']}"
        for k, v in row["windows"].items()
    )
    skew = row.get("arrival_skew_ms")
    arrival = (
        f" | arrival r1-r0 {skew['median']:5.1f} ms"
        f" (p10 {skew['p10']:5.1f}, p90 {skew['p90']:5.1f})"
        if skew
        else f" | {(row['mismatch'] or '')[:90]}"
    )
    return (
        f"{row['name']:>12} load {row['load']:4.1f} flagged {row['flagged']!s:6} "
        f"{ranks} | windows {win}{arrival}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--hogs", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--kinds", nargs="+", default=["healthy", "sleep", "shard", "skip"])
    args = parser.parse_args()
    use_scratch_store()
    ip = shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    quietly(ip.run_line_magic, "dist_cluster", "start -n 2 --cpu")
    rows = []
    try:
        quietly(ip.run_cell_magic, "dist", "", DEFINE)
        for hogs in args.hogs:
            with cpu_hogs(hogs):
                for rep in range(args.reps):
                    for kind in args.kinds:
                        if kind == "skip" and rep:
                            continue
                        row = one_run(ip, f"{kind}-{hogs}h-{rep}", kind)
                        row["hogs"] = hogs
                        rows.append(row)
                        print(describe(row), flush=True)
    finally:
        quietly(ip.run_line_magic, "dist_cluster", "stop")
    write_result("straggler", {"steps": STEPS, "runs": rows, "machine_at_start": machine()})


if __name__ == "__main__":
    main()
