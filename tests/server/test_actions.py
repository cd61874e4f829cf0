"""Interrupt and stop act on a real ipyparallel cluster recorded in the run store."""

from __future__ import annotations

import asyncio
import json
import time

import psutil
import pytest
from wireshape import assert_shape

from dist_notebook import contracts
from dist_notebook.store import StoreReader

pytestmark = pytest.mark.slow

API = ("dist-notebook", "api")


async def post(jp_fetch, cluster_id, action):
    response = await jp_fetch(*API, "clusters", cluster_id, action, method="POST", body=b"")
    return json.loads(response.body)


async def test_stop_ends_the_engines(jp_fetch, live_cluster):
    assert all(psutil.pid_exists(pid) for pid in live_cluster.pids)
    reply = await post(jp_fetch, live_cluster.id, "stop")
    assert reply == {"id": live_cluster.id, "action": "stop", "state": "stopped", "via": "server"}
    assert_shape(reply, contracts.ActionReply)
    deadline = time.monotonic() + 15
    while any(psutil.pid_exists(p) for p in live_cluster.pids) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not any(psutil.pid_exists(p) for p in live_cluster.pids)

    response = await jp_fetch(*API, "clusters", live_cluster.id)
    cluster = json.loads(response.body)
    assert cluster["state"] == "stopped"
    assert {r["state"] for r in cluster["ranks"]} == {"stopped"}
    # the store says who acted and why
    response = await jp_fetch(*API, "clusters")
    events = StoreReader().events(cluster_id=live_cluster.id)
    assert any("the kernel that owned the cluster" in e["message"] for e in events)
    # a second stop is a no-op, not an error
    assert (await post(jp_fetch, live_cluster.id, "stop"))["state"] == "stopped"


def _start_child() -> int:
    import subprocess

    return subprocess.Popen(["sleep", "300"], start_new_session=False).pid


async def test_stop_with_the_kernel_gone_leaves_no_process_of_the_tree(jp_fetch, live_cluster):
    # What a cell started on a rank (a data loader's worker, a shell command) is the
    # engine's child: ipyparallel's stop ends the engine only; the kernel's teardown and
    # the server's stop end the whole tree.
    children = live_cluster.client[:].apply_sync(_start_child)
    controller = psutil.Process(live_cluster.cluster.controller.pid)
    tree = [controller, *controller.children(recursive=True)]
    tree += [psutil.Process(pid) for pid in [*live_cluster.pids, *children]]
    assert all(p.is_running() for p in tree)
    reply = await post(jp_fetch, live_cluster.id, "stop")
    assert reply["via"] == "server", reply
    deadline = time.monotonic() + 15
    while any(_alive(p) for p in tree) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    left = [f"{p.pid} {p.name()}" for p in tree if _alive(p)]
    assert not left, f"left running after the server's stop: {left}"


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_interrupt_raises_keyboardinterrupt_in_the_running_cell(
    jp_fetch, live_cluster, tmp_path
):
    # Each engine marks that it is in the cell (an event to wait for, not a fixed sleep).
    mark = str(tmp_path / "in-cell")
    sleeping = live_cluster.client[:].execute(
        f"import os, time\nopen({mark!r} + str(os.getpid()), 'w').close()\ntime.sleep(60)"
    )
    deadline = time.monotonic() + 30
    while len(list(tmp_path.glob("in-cell*"))) < len(live_cluster.client.ids):
        assert time.monotonic() < deadline, "the engines never started the cell"
        await asyncio.sleep(0.05)
    assert not sleeping.ready()
    started = time.monotonic()
    reply = await post(jp_fetch, live_cluster.id, "interrupt")
    assert reply["action"] == "interrupt"
    assert_shape(reply, contracts.ActionReply)
    # Interrupted in ~0.1 s; the bound is for a loaded machine, far below the cell's 60 s.
    while not sleeping.ready() and time.monotonic() - started < 30:
        await asyncio.sleep(0.05)
    assert sleeping.ready(), "the engines were not interrupted"
    with pytest.raises(Exception) as info:
        sleeping.get(0)
    assert "KeyboardInterrupt" in str(info.value)
    # the engines survive an interrupt and take new work
    assert all(psutil.pid_exists(p) for p in live_cluster.pids)
    assert live_cluster.client[:].apply_sync(lambda: 41 + 1) == [42, 42]
