"""Where the cores go while a loop trains: CPU time per process and thread, per mode.

    python -m bench run cpu_share                      # modes e d a c, 2 repetitions
    python -m bench run cpu_share --modes ad --steps 2000

The MLP loop of ``bench/train_overhead.py`` (2 ranks x 1 thread) runs as (a) ``%%dist_train``
+ report() every step + dashboard, (d) the same without the dashboard, (e) ``%%dist_train``
without report(), (c) plain ``%%dist``. During each run a sampler reads every thread's CPU
time (user + system, from the kernel's own accounting: exact under load, where sampling
profilers' wall-time shares are not) of the kernel and of both ranks every 0.2 s. The
kernel's threads are named by Python (``threading``); a rank's are split into its main
(training) thread and the rest (report()'s sender, gloo, ZMQ, ipyparallel's heartbeat).
Each figure is CPU seconds over the run's wall seconds: 0.01 is 1% of one core, which on
2 cores shared with 2 ranks is about 0.5% of the ranks' throughput.

Writes ``bench/results/cpu_share.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bench import common
from bench import train_overhead as to
from dist_notebook.magics.session import Session


class ThreadClock:
    """Samples the CPU time of every thread of the kernel and of the ranks."""

    def __init__(self, ranks: dict[int, int]) -> None:
        self.ranks = ranks  # rank -> pid
        self.seen: dict[tuple[str, int], float] = {}  # (process, tid) -> latest cpu seconds
        self.start: dict[tuple[str, int], float] = {}
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-thread-clock", daemon=True)

    def _read(self) -> dict[tuple[str, int], float]:
        out = {}
        for t in psutil.Process().threads():
            out[("kernel", t.id)] = t.user_time + t.system_time
        for rank, pid in self.ranks.items():
            for t in psutil.Process(pid).threads():
                out[(f"rank{rank}", t.id)] = t.user_time + t.system_time
        self.names.update({t.native_id: t.name for t in threading.enumerate() if t.native_id})
        return out

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.seen.update(self._read())

    def __enter__(self) -> ThreadClock:
        self.start = self._read()
        self.seen = dict(self.start)
        self.t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.seen.update(self._read())
        self.wall = time.perf_counter() - self.t0

    def shares(self) -> dict[str, float]:
        """Cores used per (process, thread group) over the run."""
        used: collections.Counter[str] = collections.Counter()
        for (proc, tid), cpu in self.seen.items():
            spent = cpu - self.start.get((proc, tid), 0.0)
            if proc == "kernel":
                name = self.names.get(tid, "threads outside Python (ZMQ, ...)")
                group = "kernel: " + re.sub(r"-[0-9a-f]{8,}$", "", name)  # no cluster/run id
            else:
                pid = self.ranks[int(proc[4:])]
                group = f"{proc}: {'training thread' if tid == pid else 'other threads'}"
            used[group] += spent
        return {k: v / self.wall for k, v in used.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="edac")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args()
    store = tempfile.TemporaryDirectory()
    os.environ["DIST_NOTEBOOK_STORE"] = str(Path(store.name) / "runs.sqlite")
    loop_args = argparse.Namespace(batch=64, warmup=30, steps=args.steps)
    nb = to.Notebook(2)
    cluster = Session.for_shell(nb.ip).cluster
    assert cluster is not None
    ranks = {r.rank: r.pid for r in cluster.ranks}
    time.sleep(3)  # the ranks' background imports after the start (the kernel's: joined)
    raw: dict[str, list[dict[str, float]]] = {m: [] for m in args.modes}
    speed: dict[str, list[float]] = {m: [] for m in args.modes}
    try:
        for rep in range(args.reps):
            for mode in args.modes if rep % 2 == 0 else reversed(args.modes):
                code = to.loop_code(loop_args, mode in "ad")
                with ThreadClock(ranks) as clock:
                    if mode == "c":
                        res = nb.dist(code)
                    else:
                        res = nb.train(code, args.steps + 30, dashboard=mode == "a")
                raw[mode].append(clock.shares())
                speed[mode].append(to.samples_per_s(res))
                print(f"rep {rep + 1} ({mode}) {speed[mode][-1]:,.0f} samples/s", flush=True)
    finally:
        nb.stop()
        store.cleanup()
    summary = summarise(raw, speed)
    common.write_result("cpu_share", {"config": vars(args), **summary})
    print(table(summary))


def summarise(raw: dict[str, list[dict[str, float]]], speed: dict[str, list[float]]) -> dict:
    groups = sorted({g for runs in raw.values() for r in runs for g in r})
    shares = {
        mode: {g: statistics.median(r.get(g, 0.0) for r in runs) for g in groups}
        for mode, runs in raw.items()
    }
    return {"cores": shares, "samples_per_s": {m: statistics.median(v) for m, v in speed.items()}}


def table(summary: dict[str, Any]) -> str:
    modes = list(summary["cores"])
    groups = sorted({g for m in modes for g, v in summary["cores"][m].items() if v >= 0.001})
    head = "| cores used (CPU s / wall s) | " + " | ".join(f"({m}) {to.LABELS[m]}" for m in modes)
    rows = [head + " |", "|---|" + "---:|" * len(modes)]
    for g in groups:
        cells = " | ".join(f"{summary['cores'][m].get(g, 0.0):.3f}" for m in modes)
        rows.append(f"| {g} | {cells} |")
    speeds = " | ".join(f"{summary['samples_per_s'][m]:,.0f}" for m in modes)
    rows.append(f"| samples/s (median) | {speeds} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
