"""Faults of issue #23 for bench/faults.py, on a loaded machine (two CPU hogs beside the
ranks for the whole set):

    python bench/faults.py --only issue23

Rows: the %dist_run of a DDP script freed after main() (runs, hangs), a kernel SIGKILLed
while every rank holds the GIL in native code, scale beyond the machine, scale / push /
pull during a background run, the panel's Stop during a scale, a pull where one rank
raises and a kernel killed in a push (files left in /dev/shm), a fork-server request the
kernel gave up on, an unreachable MLflow server. "detect" is when the fault is reported
(or refused), "usable" when the cluster runs a collective again; "left" counts our
processes and files left afterwards, by process tree and by the writers' names.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from common import cpu_hogs  # (bench/ is on the path)
from script_hang import SCRIPT  # the DDP script of the hang

RUNS = 50
FROZEN_KERNEL = """
import json, sys, time
from dist_notebook import ClusterSpec, DistCluster

cluster = DistCluster(ClusterSpec(n=2))
cluster.start_sync()
cluster.client[:].execute("import ctypes; ctypes.PyDLL(None).sleep(600)", block=False)
time.sleep(1.0)
print(json.dumps({"profile": cluster.profile_dir}), flush=True)
time.sleep(120)
"""
KILLED_IN_PUSH = """
import os, signal, torch
from dist_notebook.engine import shm
print(shm.dump({"x": torch.ones(50_000_000)}).path, flush=True)  # 200 MB written
os.kill(os.getpid(), signal.SIGKILL)
"""
BACKGROUND = (
    "%%dist_train --name bg23 --background --no-dashboard\nimport time\n"
    "for step in range(600):\n    report(step=step, loss=1.0)\n    time.sleep(0.05)\n"
)


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    try:
        value = fn(*args)
    except Exception as e:  # the refusal is the outcome measured
        value = e
    return time.perf_counter() - t0, value


class Issue23:
    def __init__(self, bench: Any, root: Path) -> None:
        self.b = bench
        self.root = root

    def run_all(self) -> None:
        for case in (
            self.scripts,
            self.frozen_kernel,
            self.scale_beyond,
            self.busy_refusals,
            self.stop_during_scale,
            self.shm_paths,
            self.abandoned_fork,
            self.mlflow_unreachable,
        ):
            try:
                case()
            except Exception as e:  # a row saying what failed; the other cases still run
                self.b.row(case.__name__, None, None, note=f"failed: {type(e).__name__}: {e}"[:200])

    def scripts(self) -> None:
        script = self.root / "ddp_gather.py"
        script.write_text(SCRIPT)
        times, hung = [], 0
        for _ in range(RUNS):
            box: dict[str, float] = {}

            def run(box: dict[str, float] = box) -> None:
                t0 = time.perf_counter()
                self.b.magic("dist_run", str(script))
                box["t"] = time.perf_counter() - t0

            worker = threading.Thread(target=run, daemon=True)
            worker.start()
            worker.join(60)
            if "t" not in box:
                hung += 1
                break
            times.append(box["t"])
        usable = self.b.reduce() if not hung else None
        self.b.row(
            f"%dist_run of a DDP script freed after main(), {RUNS} runs",
            max(times, default=None),
            usable,
            lost=f"{hung} hung",
            left=0,
            note=f"{len(times)} runs, median {sorted(times)[len(times) // 2]:.2f} s, max "
            f"{max(times, default=0):.2f} s (detect = the slowest run)",
        )

    def frozen_kernel(self) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-c", FROZEN_KERNEL], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        info = proc.stdout.readline()
        tree = psutil.Process(proc.pid).children(recursive=True)
        t0 = time.perf_counter()
        proc.kill()
        proc.wait()
        gone, alive = psutil.wait_procs(tree, timeout=10)
        took = time.perf_counter() - t0
        for p in alive:
            p.kill()
        profile = info and __import__("json").loads(info)["profile"]
        self.b.row(
            "kernel SIGKILLed, every rank frozen with the GIL held",
            took if not alive else None,
            None,
            left=f"{len(alive)} of {len(tree)} processes, "
            f"{int(bool(profile and os.path.exists(profile)))} profile folders",
        )

    def scale_beyond(self) -> None:
        took, refused = timed(self.b.ip.run_line_magic, "dist_cluster", "scale 10000")
        self.b.row(
            "%dist_cluster scale 10000",
            took,
            self.b.reduce(),
            left=0,
            note=str(refused)[:120],
        )

    def busy_refusals(self) -> None:
        self.b.cell(BACKGROUND)
        run = self.b.cluster.owner.active_run()
        self.b.ip.user_ns["lr23"] = 0.1
        notes = []
        worst = 0.0
        for magic, line in (
            ("dist_cluster", "scale 1"),
            ("dist_cluster", "scale 3"),
            ("dist_push", "lr23"),
            ("dist_pull", "rank"),
        ):
            took, refused = timed(self.b.ip.run_line_magic, magic, line)
            worst = max(worst, took)
            notes.append(f"{magic} {line}: {took * 1000:.0f} ms")
        alive = run is not None and run.state.value in ("pending", "running")
        if run is not None:
            run.stop()
            while run.state.value in ("pending", "running"):
                time.sleep(0.1)
        self.b.row(
            "scale, push and pull during a --background run (refused)",
            worst,
            self.b.reduce(),
            lost=0 if alive else "the run",
            note="; ".join(notes),
        )

    def stop_during_scale(self) -> None:
        from dist_notebook.cluster.scale import scale_sync

        cluster = self.b.cluster
        result: dict[str, Any] = {}

        def panel_stop() -> None:
            while cluster.state.value != "restarting":
                time.sleep(0.01)
            t0 = time.perf_counter()
            result["r"] = cluster.owner.stop(reason="Stop in the JupyterLab panel")
            result["t"] = time.perf_counter() - t0

        pids = cluster.engines.local_pids()
        worker = threading.Thread(target=panel_stop, daemon=True)
        worker.start()
        _, scaled = timed(scale_sync, cluster, 3)
        worker.join(120)
        left = [p for p in pids if psutil.pid_exists(p)]
        self.b.row(
            "the panel's Stop during scale 3",
            result.get("t"),
            None,
            left=len(left),
            note=f"scale: {'ok' if isinstance(scaled, float) else scaled}; stop after it: "
            f"{result.get('r')}; cluster {cluster.state.value}",
        )
        self.b.start()

    def shm_paths(self) -> None:
        from dist_notebook.engine import shm

        pids = [r.pid for r in self.b.cluster.ranks]
        self.b.cell("%%dist\nbig23 = torch.ones(8_000_000)")
        took, _ = timed(
            self.b.ip.run_line_magic, "dist_pull", "big23 if rank == 0 else 1 // 0 --all"
        )
        after_error = len(shm.files_of(pids))
        proc = subprocess.run(
            [sys.executable, "-c", KILLED_IN_PUSH], capture_output=True, text=True, timeout=120
        )
        path = proc.stdout.strip()
        before = os.path.exists(path)
        self.b.magic("dist_cluster", "stop")
        self.b.start()  # any kernel's next start sweeps it
        self.b.row(
            "/dev/shm: a pull where rank 1 raises; a kernel SIGKILLed in a 200 MB push",
            took,
            self.b.reduce(),
            left=f"{after_error} files after the pull, "
            f"{int(os.path.exists(path))} after the next start (was {int(before)})",
        )

    def abandoned_fork(self) -> None:
        import json

        from dist_notebook.cluster import forkserver

        server = forkserver.current()
        if server is None:
            self.b.row("fork server: a request the kernel gave up on", None, None, note="no server")
            return
        children = {p.pid for p in psutil.Process(server.pid).children()}
        with server._cond:
            server._next_id += 1
            late = server._next_id
            server._next_id += 1
            abandoned = server._next_id
            server._abandoned.add(abandoned)
        argv = ["--IPEngine.url_file=/nonexistent/x.json", "--IPEngine.wait_for_url_file=30"]
        t0 = time.perf_counter()
        for rid, deadline in ((late, time.time() - 1), (abandoned, time.time() + 30)):
            line = {"id": rid, "argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
            line.update(output=os.devnull, deadline=deadline)
            assert server.proc.stdin is not None
            with server._write_lock:
                server.proc.stdin.write(json.dumps(line).encode() + b"\n")
                server.proc.stdin.flush()
        while server._abandoned and time.perf_counter() - t0 < 30:
            time.sleep(0.02)
        time.sleep(0.5)
        stray = {p.pid for p in psutil.Process(server.pid).children()} - children
        _, alive = psutil.wait_procs([psutil.Process(p) for p in stray], timeout=5)
        self.b.row(
            "fork server: a late request, and one forked after the kernel gave up",
            time.perf_counter() - t0,
            None,
            left=len(alive),
            note=f"late one refused: {server._replies.pop(late, {}).get('error')}",
        )

    def mlflow_unreachable(self) -> None:
        from dist_notebook.export.base import RunInfo
        from dist_notebook.export.mlflow import MlflowTarget

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        target = MlflowTarget(RunInfo(run_id="r23", name="r23"), f"http://127.0.0.1:{port}")
        took, failed = timed(target.start)
        self.b.row(
            "MLflow server unreachable: the export fails",
            took,
            None,
            note=f"{type(failed).__name__} (MLflow's own retries: ~60 s)",
        )


def run(bench: Any) -> None:
    """The issue #23 rows, under two CPU hogs; the bench's cluster is running."""
    root = Path(tempfile.mkdtemp(prefix="dist-faults23-"))
    with cpu_hogs(2):
        Issue23(bench, root).run_all()
