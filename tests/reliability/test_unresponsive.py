"""A rank stopped with SIGSTOP: the controller drops its engine after missed heartbeats.
Status must say which rank is unresponsive (not 'ready'), cells are refused with the
remedy; restart brings the cluster back (the stopped process is ended), and so does
SIGCONT alone: the cluster replaces the resumed rank by itself."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from ranklines import printed_by

from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.cluster import ClusterError
from dist_notebook.cluster.reap import process_tree

from .conftest import ALL_REDUCE, kill_all, reduce_sum, wait_gone

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
    started = [p.pid for p in process_tree(cluster.engines.local_pids())]
    stopped = cluster.ranks[1].pid
    try:
        os.kill(stopped, signal.SIGSTOP)
        # ipyparallel drops the engine after its missed heartbeats (~5 s at 500 ms).
        took = wait_for(lambda: cluster.ranks[1].state == "unresponsive", 60)
        print(f"stopped rank reported after {took:.2f} s")
        assert took < 12, "the README says about 6 s (ten missed 500 ms heartbeats)"
        assert cluster.state.value == "degraded"
        assert cluster.ranks[0].state == "idle"
        with pytest.raises(ClusterError, match="degraded.*restart"):
            reduce_sum(cluster)
        cluster.restart_sync()  # while still stopped: its process is ended
        assert cluster.state.value == "ready"
        assert [r.state for r in cluster.ranks] == ["idle", "idle"]
        assert cluster.ranks[1].pid != stopped
        assert wait_gone([stopped], 10)[0] == []
        assert reduce_sum(cluster) == ["3\n", "3\n"]
        # Stays healthy: the old engine's exit is not taken for a new death.
        time.sleep(1.0)
        assert cluster.state.value == "ready" and cluster.dead_ranks() == {}
    finally:
        started += [p.pid for p in process_tree(cluster.engines.local_pids())]
        cluster.stop_sync()
        kill_all(wait_gone(started, 10)[0])


def test_sigcont_alone_brings_the_cluster_back(shell: Any, own_cluster: Any, capsys: Any) -> None:
    """After SIGCONT, no restart typed: the cluster replaces the resumed rank by itself
    (ipyparallel never takes a dropped engine back), says so, and cells work again."""
    shell.run_cell_magic("dist", "", "kept = rank + 10")
    stopped = own_cluster.ranks[1].pid
    survivor = own_cluster.ranks[0].pid
    os.kill(stopped, signal.SIGSTOP)
    try:
        wait_for(lambda: own_cluster.ranks[1].state == "unresponsive", 60)
        # Status tells the truth while it is stopped, and keeps it: no replacement yet.
        time.sleep(1.0)
        assert own_cluster.state.value == "degraded"
        assert [r.state for r in own_cluster.ranks] == ["idle", "unresponsive"]
        assert own_cluster.ranks[1].pid == stopped
    finally:
        os.kill(stopped, signal.SIGCONT)
    t0 = time.monotonic()
    # Through restarting (the replacement) to ready, by itself.
    took = wait_for(lambda: own_cluster.state.value == "ready", 60)
    print(f"ready again {took:.2f} s after SIGCONT")
    assert [r.state for r in own_cluster.ranks] == ["idle", "idle"]
    assert own_cluster.ranks[1].pid != stopped and own_cluster.ranks[0].pid == survivor
    assert wait_gone([stopped], 10)[0] == []
    capsys.readouterr()
    result = shell.run_cell("%%dist\n" + ALL_REDUCE)
    assert result.error_in_exec is None, result.error_in_exec
    out = capsys.readouterr().out
    assert printed_by(out, "3") == {0, 1}, out
    # Bound for a loaded 2-core host; bench/faults.py keeps the figure.
    assert time.monotonic() - t0 < 30
    # The survivor kept its variables.
    assert shell.run_line_magic("dist_pull", "kept --rank 0") == 10
