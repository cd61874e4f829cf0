"""The straggler rule and the verdict on real runs: healthy, slowed, heavier shard, starved,
skipped collective.

Runs ``%%dist_train`` on 2 CPU ranks (notebook 9's MLP, 64 samples a step, 60 steps)
with no load and under two CPU hogs, and for every run prints what the product says
(``load_run(name).summary()``: the verdict line; per rank others_wait, the share of the
steps in which the others waited for the rank, others_wait as a share of the step, the
flag, starved, CPU time and run delay per step, the work ratio)
next to what the ranks measured themselves with their clocks (the same machine, so one
clock): each step's arrival at the gradient all-reduce (the last gradient hook, DDP's one
bucket launch), the skew between the ranks and each rank's own work outside it. Also
the rule over every 20-record window of the run (what the live view showed as it went):
the largest share of steps waited for, and of ``others_wait / step``, of each rank.

    .venv/bin/python -m bench run straggler [--reps 5] [--hogs 0 2] [--kinds healthy starved]
    .venv/bin/python -m bench run straggler --hogs 2 --keep   # add the 2-hog runs to the stored

Kinds of run: ``healthy`` (identical ranks), ``sleep`` (rank 1 sleeps 30 ms a step),
``shard`` (rank 1's batch is 4 x the others': a heavier shard), ``starved`` (each rank's
training thread pinned to its own core, and two busy processes pinned to rank 1's core:
rank 1 gets a third of a core and does the same work; both ranks' batch is 256), ``skip``
(no DDP: the gradient averaged by a ``dist.all_reduce`` each step, which rank 0 skips at
step 30; the cluster names it in a CollectiveMismatch. The collective watch counts the Python
``torch.distributed`` calls, not DDP's C++ all-reduce: a rank that leaves a DDP loop
early is found by gloo's 30 s timeout instead).
Writes bench/results/straggler.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from bench.common import RESULTS, cpu_hogs, machine, quietly, shell, use_scratch_store, write_result

DEFINE = r"""
import os, subprocess, sys, time, torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from dist_notebook import report

def bench_run(steps, kind):
    if kind != "starved":
        return bench_loop(steps, kind)
    # Rank 1's core shared with two busy processes; each main thread on a core of its own.
    cpus = sorted(os.sched_getaffinity(0))
    core = cpus[rank % len(cpus)]
    before = os.sched_getaffinity(0)
    busy = []
    try:
        os.sched_setaffinity(0, {core})
        if rank == 1:
            for _ in range(2):
                p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                busy.append(p)
                os.sched_setaffinity(p.pid, {core})
        return bench_loop(steps, kind)
    finally:
        for p in busy:
            p.kill()
            p.wait()
        os.sched_setaffinity(0, before)

def bench_loop(steps, kind):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    if kind != "skip":
        model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    # starved: the same 256-sample batch on both ranks (a step of ~12 ms of CPU, so a
    # third of a core shows); shard: rank 1's alone
    batch = 256 if (kind == "shard" and rank == 1) or kind == "starved" else 64
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

STEPS = 40
RESULT = RESULTS / "straggler.json"


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
    summary = run.summary()
    summaries = summary.ranks
    row: dict[str, Any] = {"name": name, "kind": kind, "load": os.getloadavg()[0]}
    row["mismatch"] = mismatch
    row["verdict"] = summary.verdict
    row["flagged"] = [s.rank for s in summaries if s.straggler]
    row["starved"] = [s.rank for s in summaries if s.starved]
    row["ranks"] = [
        {
            "rank": s.rank,
            "step_ms": None if s.step_time is None else 1e3 * s.step_time,
            "others_wait_ms": None if s.others_wait is None else 1e3 * s.others_wait,
            "share": s.others_wait / s.step_time if s.others_wait is not None else None,
            "waited_for": s.waited_for_share,
            "cpu_ms": None if s.cpu_time is None else 1e3 * s.cpu_time,
            "delay_ms": None if s.run_delay is None else 1e3 * s.run_delay,
            "work_ratio": s.work_ratio,
            "cpu_share": s.cpu_share,
        }
        for s in summaries
    ]  # fmt: skip
    records = run.records()
    row["windows"] = window_extremes(records)
    # (rank, step, step_time, comm_time, cpu_time, run_delay, load) of every record: to try
    # other rules on the same runs
    row["records"] = [
        (r.rank, r.step, r.step_time, r.comm_time, r.cpu_time, r.run_delay, r.load) for r in records
    ]
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
        f"in {r['waited_for']:4.2f} of steps, cpu {_num(r['cpu_ms'])} ms delay "
        f"{_num(r['delay_ms'])} ms work {_num(r['work_ratio'], 2)})"
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
        f"starved {row['starved']!s:6} {ranks} | windows {win}{arrival}\n"
        f"{'':>12} verdict: {row['verdict']}"
    )


def _num(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def table(rows: list[dict[str, Any]]) -> str:
    """Per kind and hogs: how many runs got each verdict (its words before the colon), and
    how many flagged a straggler or a starved rank."""
    out: dict[tuple[str, int], dict[str, int]] = {}
    for row in rows:
        cell = out.setdefault((row["kind"], row["hogs"]), {})
        said = (row["verdict"] or "none").split(":")[0]
        cell[said] = cell.get(said, 0) + 1
        cell["_runs"] = cell.get("_runs", 0) + 1
        cell["_flagged"] = cell.get("_flagged", 0) + bool(row["flagged"])
        cell["_starved"] = cell.get("_starved", 0) + bool(row["starved"])
    lines = [
        "| kind | hogs | runs | straggler flagged | starved marked | verdicts |",
        "|---|---|---|---|---|---|",
    ]
    for (kind, hogs), cell in sorted(out.items()):
        verdicts = ", ".join(f"{k} x{v}" for k, v in sorted(cell.items()) if not k.startswith("_"))
        lines.append(
            f"| {kind} | {hogs} | {cell['_runs']} | {cell['_flagged']} | {cell['_starved']} "
            f"| {verdicts} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the stored result's runs under other --hogs counts (one count a call)",
    )
    parser.add_argument("--hogs", type=int, nargs="+", default=[0, 2])
    parser.add_argument(
        "--kinds", nargs="+", default=["healthy", "sleep", "shard", "starved", "skip"]
    )
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
    if args.keep and RESULT.exists():
        kept = json.loads(RESULT.read_text()).get("runs", [])
        rows = [r for r in kept if r.get("hogs") not in args.hogs] + rows
    print(table([r for r in rows if r["kind"] != "skip"]), flush=True)
    write_result("straggler", {"steps": STEPS, "runs": rows, "machine_at_start": machine()})


if __name__ == "__main__":
    main()
