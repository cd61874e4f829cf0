"""Warm starts: a spare cluster kept by the kernel is taken by the next start of its spec,
with fresh ranks, and nothing of it is left once the pool is cleared."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from dist_notebook import ClusterSpec
from dist_notebook.cluster import pool
from dist_notebook.cluster.onranks.execute import run_on_ranks
from dist_notebook.store.reader import StoreReader

pytestmark = pytest.mark.timeout(300)


def _gone(pids: list[int], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_a_kept_spec_is_taken_warm_and_replaced_after_stop(throwaway_store: str) -> None:
    spec = ClusterSpec(n=2, threads=1)
    said: list[str] = []
    try:
        pool.keep_warm(spec)
        assert not pool.prestart(spec), "the pool holds at most MAX_SPARES spares"
        assert pool.take(ClusterSpec(n=3), said.append) is None  # another spec: no spare
        cluster = pool.take(spec, said.append)
        assert cluster is not None and cluster.state.value == "ready"
        assert pool.spares() == []  # taken: not replaced while it runs
        # Fresh ranks with a live group, recorded in the run store once taken.
        outputs = run_on_ranks(
            cluster,
            "t = torch.ones(1) * (rank + 1)\ndist.all_reduce(t)\n"
            "(t.item(), 'leftover' in globals())",
        )
        assert [o.result["data"]["text/plain"] for o in outputs if o.result] == ["(3.0, False)"] * 2
        assert cluster.id in {c["id"] for c in StoreReader(Path(throwaway_store)).clusters()}
        pids = [r.pid for r in cluster.ranks]
        cluster.stop_sync()
        assert _gone(pids, 10)
        pool.stopped(spec)  # what %dist_cluster stop calls: a replacement for the next start
        spares = pool.spares()
        assert len(spares) == 1 and spares[0].spec == spec
        spare = spares[0]
    finally:
        pool.clear()
    assert pool.spares() == []
    assert spare.state.value == "stopped"
    assert _gone([r.pid for r in spare.ranks] + spare.engines.local_pids(), 10)
