"""A rank stopped with SIGSTOP: the controller drops its engine after missed heartbeats.
Status must say which rank is unresponsive (not 'ready'), cells are refused with the
remedy, and restart brings the cluster back (the stopped process is ended)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.cluster import ClusterError
from dist_notebook.cluster.reap import process_tree

from .conftest import kill_all, reduce_sum, wait_gone

pytestmark = pytest.mark.timeout(180)


def wait_for(condition: Any, timeout: float) -> float:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout, f"not true within {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - t0


def test_stopped_rank_is_reported_and_restart_recovers(throwaway_store: str) -> None:
    cluster = DistCluster(ClusterSpec(n=2, timeout=20))
    cluster.start_sync()
    started = [p.pid for p in process_tree(cluster.local_pids())]
    stopped = cluster.ranks[1].pid
    try:
        os.kill(stopped, signal.SIGSTOP)
        # ipyparallel drops the engine after its missed heartbeats (~5 s at 500 ms).
        took = wait_for(lambda: cluster.ranks[1].state == "unresponsive", 60)
        print(f"stopped rank reported after {took:.2f} s")
        assert cluster.state.value == "degraded"
        assert cluster.ranks[0].state == "idle"
        with pytest.raises(ClusterError, match="degraded.*restart"):
            reduce_sum(cluster)
        os.kill(stopped, signal.SIGCONT)  # resumed: ipyparallel does not take it back
        cluster.restart_sync()
        assert cluster.state.value == "ready"
        assert [r.state for r in cluster.ranks] == ["idle", "idle"]
        assert cluster.ranks[1].pid != stopped
        assert wait_gone([stopped], 10)[0] == []
        assert reduce_sum(cluster) == ["3\n", "3\n"]
        # Stays healthy: the old engine's exit is not taken for a new death.
        time.sleep(1.0)
        assert cluster.state.value == "ready" and cluster.dead_ranks() == {}
    finally:
        started += [p.pid for p in process_tree(cluster.local_pids())]
        cluster.stop_sync()
        kill_all(wait_gone(started, 10)[0])
