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
    if sys.argv[1] == "frozen":
        # Every rank's main thread in native code with the GIL held (PyDLL keeps it):
        # no Python thread of the engine can run, its parent watch included.
        cluster.client[:].execute("import ctypes; ctypes.PyDLL(None).sleep(600)", block=False)
        time.sleep(1.0)
    pids = {
        "engines": [r.pid for r in cluster.ranks],
        "controller": [cluster.engines.controller_pid],
        "profile": cluster.profile_dir,
        "ipp": cluster.engines.ipp_cluster_id,
        "stack_dir": cluster.stack_dir,
    }
    print(json.dumps(pids), flush=True)
    if sys.argv[1] in ("wait", "frozen"):
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
    # A profile directory of the cluster's own (cluster.own_profile_dir) goes too.
    own = os.path.basename(info["profile"]).startswith("cluster-")
    profile = [info["profile"]] if own and os.path.exists(info["profile"]) else []
    return cluster_files(info["profile"], info["ipp"]) + stack + profile


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


def test_killed_kernel_ends_ranks_frozen_with_the_gil_held(throwaway_store: str) -> None:
    """The OS ends the ranks (PR_SET_PDEATHSIG): no Python thread of theirs can run."""
    proc, pids, info = start_kernel("frozen")
    try:
        engines = [psutil.Process(pid) for pid in info["engines"]]
        assert all(e.status() != psutil.STATUS_ZOMBIE for e in engines)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
        assert wait_gone(pids, 5) == []
        assert files_of(info) == []
    finally:
        proc.kill()
        kill_all(pids)


# A kernel under a Jupyter-like parent (jupyter_client's KernelManager sets the kernel's
# parent handle): when that parent dies, ipykernel's parent poller ends the kernel with
# os._exit, so no exit hook of the kernel runs.
MANAGER = textwrap.dedent(
    """
    import json, os, sys, time
    import psutil
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3")
    km.kernel_spec.argv[0] = sys.executable
    km.start_kernel(env=dict(os.environ))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=90)
    code = (
        "%load_ext dist_notebook\\n%dist_cluster start -n 2 --cpu\\n"
        "from dist_notebook.magics.session import Session\\n"
        "_c = Session.for_shell(get_ipython()).cluster\\n"
        "print('INFO ' + json.dumps({'profile': _c.profile_dir, 'ipp': _c.engines.ipp_cluster_id,"
        " 'stack_dir': _c.stack_dir}))\\n"
    )
    out = []
    hook = lambda m: out.append(m["content"].get("text", "")) if m["msg_type"] == "stream" else 0
    reply = kc.execute_interactive("import json\\n" + code, timeout=120, output_hook=hook)
    assert reply["content"]["status"] == "ok", reply["content"]
    info = json.loads(next(x for x in "".join(out).splitlines() if x.startswith("INFO "))[5:])
    info["tree"] = [p.pid for p in psutil.Process().children(recursive=True)]
    print(json.dumps(info), flush=True)
    time.sleep(120)  # until the test kills us
    """
)


def test_kernel_ended_by_its_parent_poller_leaves_nothing(throwaway_store: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", MANAGER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    info: dict[str, Any] = {"tree": []}
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            pytest.fail(f"the kernel did not start a cluster:\n{proc.communicate()[1]}")
        info = json.loads(line)
        assert len(info["tree"]) >= 1 + 2 + 1 + 8, info["tree"]  # kernel, engines, controller
        os.kill(proc.pid, signal.SIGKILL)  # the kernel's parent
        proc.communicate(timeout=10)
        assert wait_gone(info["tree"], 10) == []
        assert files_of(info) == []
    finally:
        proc.kill()
        kill_all(info["tree"])
