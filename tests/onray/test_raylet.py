"""A Ray node lost under the ranks: its ``raylet`` killed with SIGKILL mid-cell.

A head of its own (the node dies with its raylet): the running cell fails within seconds
naming each rank dead with Ray's reason, and stop returns and leaves no engine process.
The raylet is found among the children of our own ``ray start --block`` process. The
kernel's connection to the lost cluster is dropped after such a stop: a later start in
the same kernel, on another Ray cluster (the package's head), connects afresh and works.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import psutil
import pytest
from conftest import session_of
from IPython.utils.capture import capture_output

from .conftest import started_head

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
NAMED_WITHIN_S = 15.0
LOOP_CELL = """
import time
for _ in range(600):
    x = torch.ones(1); dist.all_reduce(x); time.sleep(0.05)
"""


def _raylet(head: Any) -> int:
    found = [
        p.pid for p in psutil.Process(head.pid).children(recursive=True) if p.name() == "raylet"
    ]
    assert len(found) == 1, found
    return found[0]


def test_killed_raylet_names_every_rank_dead_and_stop_cleans_up(shell: Any, ray_head: str) -> None:
    import ray

    from dist_notebook.cluster.rayengines import connection

    session = session_of(shell)
    saved, session.cluster = session.cluster, None
    assert not ray.is_initialized()  # one Ray cluster a driver: the package head's is closed
    try:
        with started_head() as (address, head):
            with capture_output() as cap:
                shell.run_line_magic(
                    "dist_cluster", f"start -n 2 --cpu --launcher ray --address {address}"
                )
            cluster = session.cluster
            assert cluster is not None and cluster.state.value == "ready", cap.stdout
            engines = [r.pid for r in cluster.ranks]
            raylet = _raylet(head)
            killed: list[float] = []

            def kill() -> None:
                time.sleep(3.0)
                killed.append(time.monotonic())
                os.kill(raylet, signal.SIGKILL)

            threading.Thread(target=kill, daemon=True).start()
            with capture_output():
                result = shell.run_cell("%%dist\n" + LOOP_CELL)
            took = time.monotonic() - killed[0]
            print(f"raylet kill named in {took:.2f} s")
            error = str(result.error_in_exec)
            assert "died: its Ray actor died" in error, error
            assert took < NAMED_WITHIN_S, took
            dead = cluster.dead_ranks()
            assert sorted(dead) == [0, 1] and all("Ray actor died" in h for h in dead.values())
            t0 = time.monotonic()
            cluster.stop_sync()
            print(f"stop after the raylet's death: {time.monotonic() - t0:.2f} s")
            deadline = time.monotonic() + 20
            while any(map(psutil.pid_exists, engines)) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not any(map(psutil.pid_exists, engines))
        # The dead connection is dropped (in the background), not kept for a later start.
        deadline = time.monotonic() + 60
        while ray.is_initialized() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not ray.is_initialized() and connection.held() == 0
        t0 = time.monotonic()
        with capture_output() as cap:
            shell.run_line_magic(
                "dist_cluster", f"start -n 2 --cpu --launcher ray --address {ray_head}"
            )
        again = session.cluster
        assert again is not None and again.state.value == "ready", cap.stdout
        with capture_output() as cap:
            shell.run_cell_magic("dist", "", "x = torch.ones(1); dist.all_reduce(x); print(x)")
        assert cap.stdout.count("tensor([2.])") >= 1, cap.stdout
        print(f"a start after the lost cluster: ready in {time.monotonic() - t0:.1f} s")
        again.stop_sync()
    finally:
        current = session.cluster
        if current is not None and current.state.value != "stopped":
            current.stop_sync()
        session.cluster = saved
        if ray.is_initialized():
            ray.shutdown()
