"""Shared pieces of the side-by-side benchmarks: statistics, the machine, peers, JSON.

Every benchmark of this folder compares the same work done by dist-notebook and by its
peers (torchrun, accelerate's ``notebook_launcher``, nbdistributed, ipyparallel by hand),
runs the sides interleaved (A B A B ...) so that drift in the machine's load falls on all
of them, and writes ``bench/results/<name>.json``. ``python -m bench run --all``
(``run_all.py``) runs the registry's set and folds the results into ``bench/results/README.md``.

``BENCH_QUICK=1`` (or ``--quick``) shrinks every repetition count: a smoke run.

A bench stopped by SIGTERM (``run_all.py``'s time budget, or ``run_all.py`` itself being
stopped) or SIGHUP ends as Ctrl-C does: a KeyboardInterrupt, so its ``finally`` blocks stop
the clusters it started. ipyparallel starts its controller and engines in sessions of
their own, out of reach of a signal to the bench's process group: without this a plain
ipyparallel baseline cluster outlived an interrupted bench.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Where results go: bench/results/ (what the docs read), or BENCH_RESULTS, which
# `python -m bench run --quick` points at a scratch folder so that a smoke run never
# overwrites a figure the docs cite.
RESULTS = Path(os.environ.get("BENCH_RESULTS") or HERE / "results")
PY = sys.executable
# nbdistributed starts its workers with the bare command "python": the interpreter of
# this environment must come first on PATH for them to find torch.
BIN_DIR = str(Path(sys.executable).parent)


def _interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP raise KeyboardInterrupt in this (main) thread."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


if threading.current_thread() is threading.main_thread():
    stop_on_signals()


def end_group(proc: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """End the process group of *proc* (started with ``start_new_session``): SIGTERM, so
    its finally blocks stop what it started, then SIGKILL after *grace* seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            if sig == signal.SIGTERM:
                # The leader is gone; what it left in its group (a failed start) goes too.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            return
        except subprocess.TimeoutExpired:
            continue


def quick() -> bool:
    return os.environ.get("BENCH_QUICK", "") not in ("", "0")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median": statistics.median(values),
        "p90": percentile(values, 90),
        "min": min(values),
        "max": max(values),
        "values": [round(v, 6) for v in values],
    }


def machine() -> dict[str, Any]:
    """Cores, memory, versions and date: the line every table carries."""
    import psutil
    import torch

    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    for name in ("ipyparallel", "accelerate", "nbdistributed", "IPython"):
        info[name] = package_version(name)
    return info


def package_version(name: str) -> str | None:
    from importlib import metadata

    dist = {"IPython": "ipython"}.get(name, name)
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def write_result(name: str, payload: dict[str, Any], path: Path | None = None) -> Path:
    """Every benchmark's one format: ``{"benchmark": name, ...payload, "machine": ...}`` in
    ``RESULTS/<name>.json`` (or *path*), which run_all and the docs read."""
    path = path or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, **payload, "machine": machine()}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"wrote {path}", flush=True)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(threads: int | None = 1, **extra: str) -> dict[str, str]:
    """Environment for a measured child: one thread a rank, this venv first on PATH,
    a throwaway run store."""
    env = dict(os.environ)
    env["PATH"] = BIN_DIR + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
        env["MKL_NUM_THREADS"] = str(threads)
    env.setdefault(
        "DIST_NOTEBOOK_STORE", str(Path(tempfile.mkdtemp(prefix="dist-bench-")) / "runs.sqlite")
    )
    env.update(extra)
    return env


def use_scratch_store() -> None:
    """A throwaway run store: a benchmark never writes into the user's own."""
    os.environ.setdefault(
        "DIST_NOTEBOOK_STORE", str(Path(tempfile.mkdtemp(prefix="dist-bench-")) / "runs.sqlite")
    )


def shell() -> Any:
    """An IPython shell (as a notebook kernel runs one), made once per process."""
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    assert ip is not None
    return ip


def quietly(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call fn with stdout/stderr captured (magics print tables and progress)."""
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        value = fn(*args, **kwargs)
    return value, captured


def result_line(text: str, tag: str = "BENCH_RESULT ") -> Any:
    for line in text.splitlines():
        if tag in line:
            return json.loads(line.split(tag, 1)[1])
    raise RuntimeError(f"no {tag.strip()} line in output:\n{text[-3000:]}")


def run_child(
    cmd: list[str], timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        cmd, env=env or child_env(), capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    return done


def module_cmd(module: str, *args: str) -> list[str]:
    """The command that runs the harness's module *module* (``bench.<module>``) in a fresh
    interpreter: run it with ``cwd=ROOT`` or :func:`child_env`'s ``PYTHONPATH``."""
    return [PY, "-m", f"bench.{module}", *args]


def torchrun_cmd(module: str, nproc: int, *args: str) -> list[str]:
    """torchrun on one machine, *nproc* ranks, each running ``bench.<module>``."""
    return [
        PY,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "-m",
        f"bench.{module}",
        *args,
    ]


@contextlib.contextmanager
def timer() -> Iterator[list[float]]:
    box: list[float] = []
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - t0)


@contextlib.contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """*count* busy processes (a ``while True: pass`` each) beside the block: the load under
    which this machine's timing bugs showed; killed and waited for when the block ends."""
    procs = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=10)


def interleave(names: list[str], rep: int) -> list[str]:
    """A B C, then C B A: neither side always follows the same other one."""
    return names if rep % 2 == 0 else list(reversed(names))


def md_table(head: list[str], rows: list[list[Any]]) -> str:
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|",
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: Any, digits: int = 2, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}{unit}"
    return str(value)
