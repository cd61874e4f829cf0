"""``--auto-restart`` with ``--launcher ray``: a rank's actor killed mid-cell is replaced
after the failed cell (a new actor), and the next cell's collective works."""

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
from ranklines import printed_by

from .raystate import actor_pids

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
LOOP_CELL = """
import time
for _ in range(600):
    x = torch.ones(1); dist.all_reduce(x); time.sleep(0.05)
"""


def test_auto_restart_places_a_new_actor_after_the_failed_cell(shell: Any, ray_head: str) -> None:
    session = session_of(shell)
    saved, session.cluster = session.cluster, None
    try:
        with capture_output() as cap:
            shell.run_line_magic(
                "dist_cluster",
                f"start -n 2 --cpu --launcher ray --address {ray_head} --auto-restart",
            )
        cluster = session.cluster
        assert cluster is not None and cluster.state.value == "ready", cap.stdout
        before = actor_pids(cluster)
        actor = psutil.Process(cluster.ranks[1].pid).ppid()

        def kill() -> None:
            time.sleep(3.0)
            os.kill(actor, signal.SIGKILL)

        threading.Thread(target=kill, daemon=True).start()
        with capture_output() as cap:
            failed = shell.run_cell("%%dist\n" + LOOP_CELL)
        assert "its Ray actor died" in str(failed.error_in_exec), failed.error_in_exec
        assert "auto-restart: replacing rank(s) 1" in cap.stdout, cap.stdout
        assert cluster.state.value == "ready"
        after = actor_pids(cluster)
        assert len(after) == 2 and actor not in after.values() and after != before
        with capture_output() as cap:
            shell.run_cell_magic(
                "dist", "", "x = torch.ones(1); dist.all_reduce(x); print(x.item())"
            )
        assert printed_by(cap.stdout, "2.0") == {0, 1}, cap.stdout
    finally:
        current = session.cluster
        if current is not None and current.state.value != "stopped":
            current.stop_sync()
        session.cluster = saved
