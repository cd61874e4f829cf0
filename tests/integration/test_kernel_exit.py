"""When the kernel's process ends, normally or killed, no engine or controller outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from typing import Any

import psutil
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
        "profile": cluster.profile_dir,
        "ipp": cluster._ipp.cluster_id,
        "stack_dir": cluster.stack_dir,
    }
    print(json.dumps(pids), flush=True)
    if sys.argv[1] == "wait":
        time.sleep(120)  # until the test kills us
    sys.stdin.readline()  # the test has seen the whole tree: a normal exit now
    # the exit hook stops the cluster
    """
)


def start_kernel(mode: str) -> tuple[subprocess.Popen[str], list[int], dict[str, Any]]:
    """A kernel-like process with a cluster: (process, every pid of its tree, its info)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", KERNEL, mode],
        stdin=subprocess.PIPE,
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
    info = json.loads(line)
    # The whole tree (the controller's 8 schedulers, the engines' nannies), by pid.
    tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    assert set(info["engines"] + info["controller"]) <= set(tree)
    assert len(tree) >= 2 + 1 + 8, f"expected engines, controller and schedulers: {tree}"
    return proc, tree, info


def files_of(info: dict[str, Any]) -> list[str]:
    """The cluster's files: ipyparallel's (connection, cluster, logs) and our stack folder."""
    from dist_notebook.cluster.reap import cluster_files

    stack = [info["stack_dir"]] if os.path.exists(info["stack_dir"]) else []
    return cluster_files(info["profile"], info["ipp"]) + stack


def test_normal_exit_stops_the_cluster(throwaway_store: str) -> None:
    proc, pids, info = start_kernel("exit")
    try:
        proc.communicate("\n", timeout=30)
        assert proc.returncode == 0
        assert wait_gone(pids, 5) == []
        assert files_of(info) == []
    finally:
        proc.kill()
        kill_all(pids)


def test_killed_kernel_leaves_no_orphan(throwaway_store: str) -> None:
    proc, pids, info = start_kernel("wait")
    try:
        assert files_of(info), "the cluster's files should exist while it runs"
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
        # Engines and controller watch their parent and end themselves, their own
        # children (schedulers, nannies) with them: 2 s, with room for a busy host.
        assert wait_gone(pids, 5) == []
        assert files_of(info) == []
    finally:
        proc.kill()
        kill_all(pids)
