"""The controller dies (SIGKILL) while the kernel lives: the cluster says so at once,
nothing of the old cluster keeps running, and restart brings a new one."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.cluster import ClusterError
from dist_notebook.cluster.reap import cluster_files, process_tree

from .conftest import kill_all, reduce_sum, wait_gone

pytestmark = pytest.mark.timeout(180)


def wait_for(condition: Any, timeout: float) -> float:
    """Seconds until condition() is true; fails the test after *timeout*."""
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout, f"not true within {timeout} s"
        time.sleep(0.01)
    return time.monotonic() - t0


def stored_state(store: str, cluster_id: str, expected: str, timeout: float = 10) -> str:
    """The cluster's state in the run store once it is *expected* (the writer batches
    its writes), or the last one read after *timeout*."""
    from dist_notebook.store import StoreReader

    deadline = time.monotonic() + timeout
    while True:
        rows = [c for c in StoreReader(Path(store)).clusters() if c["id"] == cluster_id]
        state = str(rows[0]["state"]) if rows else "absent"
        if state == expected or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def test_controller_killed_is_detected_and_restart_replaces_it(throwaway_store: str) -> None:
    cluster = DistCluster(ClusterSpec(n=2))
    cluster.start_sync()
    started = [p.pid for p in process_tree(cluster.engines.local_pids())]
    try:
        old_files = cluster_files(cluster.profile_dir, cluster.engines.ipp_cluster_id)
        assert old_files
        controller = cluster.engines.controller_pid
        os.kill(controller, signal.SIGKILL)
        # Detected by the launcher's wait thread: 1 s, bound generous for a busy host.
        took = wait_for(lambda: cluster.failure is not None, 10)
        print(f"controller death detected after {took:.2f} s")
        assert cluster.state.value == "failed"
        # The store says so too (READY -> FAILED was refused there and it kept "ready"),
        # and so does the server's view of it, which reads the store.
        assert stored_state(throwaway_store, cluster.id, "failed") == "failed"
        assert "controller died (signal SIGKILL)" in cluster.failure
        assert "%dist_cluster restart" in cluster.failure
        # Its schedulers and the useless engines (with their nannies) are gone.
        assert wait_gone(started, 10)[0] == []
        with pytest.raises(ClusterError, match="controller died.*restart"):
            reduce_sum(cluster)
        cluster.restart_sync()
        assert cluster.state.value == "ready" and cluster.failure is None
        assert stored_state(throwaway_store, cluster.id, "ready") == "ready"  # its second life
        assert reduce_sum(cluster) == ["3\n", "3\n"]
        assert not any(os.path.exists(p) for p in old_files)
    finally:
        started += [p.pid for p in process_tree(cluster.engines.local_pids())]
        cluster.stop_sync()
        kill_all(wait_gone(started, 10)[0])
