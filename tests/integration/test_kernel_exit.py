"""When the kernel's process ends, normally or killed, no engine or controller outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from .procs import kill_all, wait_gone

pytestmark = pytest.mark.timeout(90)

KERNEL = textwrap.dedent(
    """
    import json, sys, time
    from dist_notebook import ClusterSpec, DistCluster

    cluster = DistCluster(ClusterSpec(n=2))
    cluster.start_sync()
    pids = {
        "engines": [r.pid for r in cluster.ranks],
        "controller": [cluster._ipp.controller.process.pid],
    }
    print(json.dumps(pids), flush=True)
    if sys.argv[1] == "wait":
        time.sleep(120)  # until the test kills us
    # else: a normal exit; the exit hook stops the cluster
    """
)


def start_kernel(mode: str) -> tuple[subprocess.Popen[str], list[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", KERNEL, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        err = proc.stderr.read() if proc.stderr else ""
        pytest.fail(f"the kernel process failed to start a cluster:\n{err}")
    pids = json.loads(line)
    return proc, pids["engines"] + pids["controller"]


def test_normal_exit_stops_the_cluster(throwaway_store: str) -> None:
    proc, pids = start_kernel("exit")
    try:
        proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert wait_gone(pids, 10) == []
    finally:
        proc.kill()
        kill_all(pids)


def test_killed_kernel_leaves_no_orphan(throwaway_store: str) -> None:
    proc, pids = start_kernel("wait")
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
        # Engines and controller watch their parent and end themselves.
        assert wait_gone(pids, 5) == []
    finally:
        proc.kill()
        kill_all(pids)
