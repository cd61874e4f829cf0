"""What a rank's signal is said as: a rank stopped with SIGSTOP is named, with both ways
out; a rank dead of SIGSEGV while TORCH_DISTRIBUTED_DEBUG=DETAIL is set (torch's DDP on
gloo segfaults rank 0 with it, under torchrun too) is said so, with the fix."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.cluster.reap import process_tree

from .conftest import kill_all, wait_gone

pytestmark = pytest.mark.timeout(180)


def wait_for(condition: Any, timeout: float) -> None:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout, f"not true within {timeout} s"
        time.sleep(0.05)


def test_stopped_and_segfaulted_ranks_are_said_with_the_fix(
    throwaway_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    cluster = DistCluster(ClusterSpec(n=2, timeout=20))
    cluster.start_sync()
    started = [p.pid for p in process_tree(cluster.engines.local_pids())]
    first, second = cluster.ranks[0].pid, cluster.ranks[1].pid
    try:
        os.kill(first, signal.SIGSEGV)
        wait_for(lambda: 0 in cluster.dead_ranks(), 30)
        segv = cluster.dead_ranks()[0]
        assert "SIGSEGV" in segv and "TORCH_DISTRIBUTED_DEBUG=DETAIL" in segv, segv
        assert "unset it or set it to INFO" in segv, segv
        os.kill(second, signal.SIGSTOP)
        wait_for(lambda: 1 in cluster.dead_ranks(), 60)  # the controller drops it (~6 s)
        said = cluster.dead_ranks()[1]
        assert "rank 1 is stopped (SIGSTOP): send SIGCONT" in said, said
        assert "restart" in said, said
    finally:
        os.kill(second, signal.SIGCONT)
        started += [p.pid for p in process_tree(cluster.engines.local_pids())]
        cluster.stop_sync()
        kill_all(wait_gone(started, 10)[0])
