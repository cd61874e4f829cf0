"""What ``%%dist_train`` costs: the same DDP loop run three ways, side by side.

    python -m bench run train_overhead                 # 3 repetitions, 1500 timed steps, modes abde
    python -m bench run train_overhead --reps 5 --steps 1000

(a) ``%%dist_train`` with ``report()`` every step and the live dashboard drawing
    (an IPython shell from ``start_ipython``: the widgets render into the void but every
    PNG is still drawn, in the same process as the collector);
(b) ``torchrun --nproc-per-node 2`` on a script holding the same loop (the reference);
(c) ``%%dist`` with the same loop and no reporting.

Two more modes split (a)'s cost: (d) ``%%dist_train --no-dashboard`` with report() every
step, and (e) ``%%dist_train --no-dashboard`` with no report() call (the run's channel
is open and DDP's all-reduce is timed, nothing is sent): ``--modes abcde``.

The loop is an MLP (3 hidden layers of 256) on synthetic data, batch 64 per rank, 2 ranks,
1 thread each. Only the loop is timed, inside it, on rank 0: ``--steps`` steps after
``--warmup`` steps, so start-up, rendezvous and imports never count. The modes run
interleaved (a b c a b c ...) so drift in the machine's load falls on all of them.

Latency, from runs of (a): report() to the collector (``time.time()`` when the collector
hands a record to RunMetrics minus the record's own ``time``, set by report() on the
rank), and report() to the live view (the moment a message to the widget is sent minus
the time of the newest record in it; messages go at most every flush interval, so this
includes the wait; "one live-view message" is the kernel's time to build and send it).

Writes ``bench/results/train_overhead.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from bench import common

RESULTS = common.RESULTS / "train_overhead.json"

# The loop, shared verbatim by the three modes. REPORT is replaced by a report() call
# for (a) and by nothing for (b) and (c). bench_result holds rank 0's timing.
LOOP = """
import time
import torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

torch.manual_seed(0)
model = DDP(nn.Sequential(
    nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
    nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10),
))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
gen = torch.Generator().manual_seed(dist.get_rank())
xs = torch.randn(16, {batch}, 256, generator=gen)
ys = torch.randint(0, 10, (16, {batch}), generator=gen)
loss_fn = nn.CrossEntropyLoss()
for i in range({warmup} + {steps}):
    if i == {warmup}:
        dist.barrier()
        t0 = time.perf_counter()
    loss = loss_fn(model(xs[i % 16]), ys[i % 16])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    REPORT
elapsed = time.perf_counter() - t0
bench_result = {{"elapsed": elapsed, "steps": {steps}, "batch": {batch},
                 "world": dist.get_world_size(), "threads": torch.get_num_threads()}}
"""
REPORT_CALL = "report(step=i, loss=loss, samples={batch})"

TORCHRUN_SCRIPT = """
import json, os
import torch.distributed as dist
dist.init_process_group("gloo")
{loop}
if dist.get_rank() == 0:
    print("BENCH_RESULT " + json.dumps(bench_result), flush=True)
dist.destroy_process_group()
"""


def loop_code(args: argparse.Namespace, reporting: bool) -> str:
    code = LOOP.format(batch=args.batch, warmup=args.warmup, steps=args.steps)
    call = REPORT_CALL.format(batch=args.batch) if reporting else ""
    code = code.replace("REPORT", call)
    if reporting:
        code = "from dist_notebook import report\n" + code
    return code


def samples_per_s(result: dict[str, Any]) -> float:
    return result["steps"] * result["batch"] * result["world"] / result["elapsed"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class Probe:
    """Receive-time hooks, in this benchmark only: wraps RunMetrics.add and LiveFeed._send."""

    def __init__(self) -> None:
        from dist_notebook.display.live import LiveFeed
        from dist_notebook.metrics.series import RunMetrics

        self.collector_ms: list[float] = []
        self.widget_ms: list[float] = []
        self.render_ms: list[float] = []
        self.renders = 0
        self.active = False  # only runs of mode (a) are measured
        probe = self
        add, send = RunMetrics.add, LiveFeed._send

        def timed_add(metrics: Any, records: list[Any]) -> None:
            now = time.time()
            if probe.active:
                probe.collector_ms.extend((now - r.time) * 1000 for r in records)
            add(metrics, records)

        def timed_send(feed: Any, records: list[Any], reset: bool, **how: Any) -> None:
            start = time.time()
            send(feed, records, reset, **how)
            end = time.time()
            if not probe.active:
                return
            probe.render_ms.append((end - start) * 1000)
            probe.renders += 1
            if records and not reset:
                # The newest record of the message: report() on the rank -> sent to the view.
                probe.widget_ms.append((end - max(r.time for r in records)) * 1000)

        RunMetrics.add = timed_add  # type: ignore[method-assign]
        LiveFeed._send = timed_send  # type: ignore[method-assign]


class Notebook:
    """An IPython shell with the extension and a 2-rank CPU cluster, 1 thread a rank."""

    def __init__(self, ranks: int) -> None:
        from IPython.testing.globalipapp import start_ipython

        self.ip = start_ipython()
        self.ip.run_line_magic("load_ext", "dist_notebook")
        self.quietly(self.ip.run_line_magic, "dist_cluster", f"start -n {ranks} --cpu --threads 1")
        # The kernel imports torch in the background after a start (for the first pull):
        # let it finish, so it never weighs on a measured run.
        for thread in threading.enumerate():
            if thread.name == "dist-notebook-warm":
                thread.join(timeout=120)

    @staticmethod
    def quietly(fn: Any, *args: Any) -> Any:
        from IPython.utils.capture import capture_output

        with capture_output():
            return fn(*args)

    def pull_result(self) -> dict[str, Any]:
        return self.quietly(self.ip.run_line_magic, "dist_pull", "bench_result")

    def train(self, code: str, steps: int, dashboard: bool = True) -> dict[str, Any]:
        flags = f"--steps {steps}" + ("" if dashboard else " --no-dashboard")
        self.quietly(self.ip.run_cell_magic, "dist_train", flags, code)
        # The cell shows the run's end and returns nothing; the magics keep the result.
        result = self.ip.magics_manager.registry["TrainMagics"].last_result
        if result is None or result.state.value != "succeeded":
            raise RuntimeError(f"the %%dist_train run did not succeed: {result}")
        return self.pull_result()

    def dist(self, code: str) -> dict[str, Any]:
        self.quietly(self.ip.run_cell_magic, "dist", "", code)
        return self.pull_result()

    def stop(self) -> None:
        self.quietly(self.ip.run_line_magic, "dist_cluster", "stop")


def torchrun(script: Path, ranks: int) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(ranks),
        str(script),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    for line in done.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            return json.loads(line.removeprefix("BENCH_RESULT "))
    raise RuntimeError(f"torchrun gave no result (exit {done.returncode}):\n{done.stderr[-3000:]}")


LABELS = {
    "a": "%%dist_train + report() + dashboard",
    "b": "torchrun",
    "c": "%%dist, no reporting",
    "d": "%%dist_train + report(), no dashboard",
    "e": "%%dist_train, no report(), no dashboard",
}


def table(summary: dict[str, Any]) -> str:
    modes = summary["modes"]
    rows = [
        "| mode | samples/s (median) | runs | vs torchrun |",
        "|---|---:|---|---:|",
    ]
    for key, label in LABELS.items():
        if key not in modes:
            continue
        m = modes[key]
        runs = ", ".join(f"{v:,.0f}" for v in m["samples_per_s"])
        ratio = m["median"] / modes["b"]["median"]
        rows.append(f"| ({key}) {label} | {m['median']:,.0f} | {runs} | {ratio:.3f} |")
    lat = summary["latency_ms"]
    rows += [
        "",
        "| latency (ms) | p50 | p95 | n |",
        "|---|---:|---:|---:|",
    ]
    for key, label in (
        ("collector", "report() -> collector"),
        ("widget", "report() -> live-view message sent"),
        ("render", "one live-view message (kernel CPU side)"),
    ):
        v = lat[key]
        p50, p95 = (f"{v[q]:.2f}" if v[q] is not None else "-" for q in ("p50", "p95"))
        rows.append(f"| {label} | {p50} | {p95} | {v['n']} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions of a, b, c (default 3)")
    parser.add_argument("--steps", type=int, default=600, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps first")
    parser.add_argument("--batch", type=int, default=64, help="batch per rank")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument(
        "--modes", default="abc", help="modes to run, in order; b is required (default abc)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    store_dir = tempfile.TemporaryDirectory()
    os.environ["DIST_NOTEBOOK_STORE"] = str(Path(store_dir.name) / "runs.sqlite")
    script = Path(store_dir.name) / "loop.py"
    script.write_text(TORCHRUN_SCRIPT.format(loop=textwrap.dedent(loop_code(args, False))))
    probe = Probe()
    nb = Notebook(args.ranks)
    results: dict[str, list[float]] = {m: [] for m in args.modes}
    total = args.warmup + args.steps
    try:
        for rep in range(args.reps):
            for mode in args.modes:
                probe.active = mode == "a"
                if mode == "a":
                    res = nb.train(loop_code(args, True), total)
                elif mode == "b":
                    res = torchrun(script, args.ranks)
                elif mode == "c":
                    res = nb.dist(loop_code(args, False))
                elif mode == "d":
                    res = nb.train(loop_code(args, True), total, dashboard=False)
                else:
                    res = nb.train(loop_code(args, False), total, dashboard=False)
                assert res["threads"] == 1, res
                results[mode].append(samples_per_s(res))
                print(f"rep {rep + 1} ({mode}) {results[mode][-1]:,.0f} samples/s", flush=True)
            # Written after every repetition, so a run cut short still leaves its numbers.
            summary = summarise(args, results, probe, reps_done=rep + 1)
            common.write_result("train_overhead", summary, path=args.out)
    finally:
        nb.stop()
        store_dir.cleanup()

    print()
    print(table(summary))
    ratios = "   ".join(f"{k} = {v:.3f}" for k, v in summary["ratios"].items())
    print(f"\n{ratios}   (target a/b >= 0.99); written to {args.out}")


def summarise(
    args: argparse.Namespace, results: dict[str, list[float]], probe: Probe, reps_done: int
) -> dict[str, Any]:
    modes = {k: {"samples_per_s": v, "median": statistics.median(v)} for k, v in results.items()}

    def stats(values: list[float]) -> dict[str, float | None]:
        if not values:
            return {"p50": None, "p95": None, "n": 0}
        return {"p50": percentile(values, 50), "p95": percentile(values, 95), "n": len(values)}

    return {
        "config": {
            **{k: v for k, v in vars(args).items() if k != "out"},
            "reps_done": reps_done,
            "threads_per_rank": 1,
            "cpu_affinity": len(os.sched_getaffinity(0)),
            "model": "MLP 256-256-256-256-10, DDP, gloo",
            "report_every": 1,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "modes": modes,
        "ratios": {f"{m}/b": modes[m]["median"] / modes["b"]["median"] for m in modes if m != "b"},
        "latency_ms": {
            "collector": stats(probe.collector_ms),
            "widget": stats(probe.widget_ms),
            "render": stats(probe.render_ms),
        },
        "renders": probe.renders,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


if __name__ == "__main__":
    main()
