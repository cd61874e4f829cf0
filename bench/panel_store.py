"""What the panel's polls cost on a store of months of use: GET clusters and GET runs
(RunStoreManager, the REST API's code without HTTP) on 50 stopped clusters and N ended
runs of 10 steps x 2 ranks each. Prints median and p95 milliseconds per call.

    .venv/bin/python bench/panel_store.py [RUNS ...]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dist_notebook.protocol import Record
from dist_notebook.server.manager import RunStoreManager
from dist_notebook.store import StoreWriter


def fill(path: Path, runs: int, clusters: int = 50) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    writer = StoreWriter(path)
    for c in range(clusters):
        writer.add_cluster(
            f"c{c}", n=2, backend="gloo", kernel_pid=proc.pid, profile_dir="", ipp_cluster_id=""
        )
        writer.set_cluster_state(f"c{c}", "ready")
        writer.set_cluster_state(f"c{c}", "stopped")
    for i in range(runs):
        rid = f"r{i}"
        writer.add_run(
            rid, name=f"sweep-{i}", cluster_id=f"c{i % clusters}", ranks=[0, 1], steps=10, code=""
        )
        writer.append_metrics(
            rid,
            [
                Record(rank=r, step=s, time=float(s), metrics={"loss": 1.0})
                for s in range(10)
                for r in (0, 1)
            ],
        )
        writer.set_run_state(rid, "running")
        writer.set_run_state(rid, "succeeded")
    writer.close()


def timed(call, repeat: int = 50) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * len(samples)) - 1]


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [200, 2000]
    print("runs  clusters  GET clusters ms (p50/p95)  GET runs ms (p50/p95)")
    for runs in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "runs.sqlite"
            fill(path, runs)
            manager = RunStoreManager(path)
            c50, c95 = timed(manager.clusters)
            r50, r95 = timed(manager.runs)
            print(f"{runs:5d}  {50:8d}  {c50:10.1f} / {c95:5.1f}  {r50:16.1f} / {r95:5.1f}")


if __name__ == "__main__":
    main()
