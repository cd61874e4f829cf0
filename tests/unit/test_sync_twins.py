"""Sync twins derived from the async methods (dist_notebook/cluster/loop.sync_twin),
not written by hand: the same arguments, the result of the method, the override of a
subclass, run on the background loop also where an event loop already runs (a kernel).
"""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

from dist_notebook.cluster.cluster import DistCluster
from dist_notebook.cluster.loop import sync_twin


class Thing:
    def __init__(self) -> None:
        self.threads: list[str] = []

    async def grow(self, n: int, *, by: int = 1) -> int:
        self.threads.append(threading.current_thread().name)
        await asyncio.sleep(0)
        return n + by

    async def fail(self) -> None:
        raise ValueError("the message of the async method")

    grow_sync = sync_twin(grow)
    fail_sync = sync_twin(fail)


class Other(Thing):
    async def grow(self, n: int, *, by: int = 1) -> int:
        return -n


def test_a_twin_takes_the_arguments_and_returns_the_result() -> None:
    thing = Thing()
    assert thing.grow_sync(2) == 3
    assert thing.grow_sync(2, by=5) == 7
    assert thing.threads == ["dist-notebook-loop", "dist-notebook-loop"]


def test_a_twin_raises_what_the_method_raises() -> None:
    with pytest.raises(ValueError, match="the message of the async method"):
        Thing().fail_sync()


def test_a_twin_runs_the_override_of_a_subclass() -> None:
    assert Other().grow_sync(4) == -4


def test_a_twin_works_where_an_event_loop_runs() -> None:
    async def cell() -> int:  # as in a Jupyter kernel: a loop runs on this thread
        return Thing().grow_sync(1)

    assert asyncio.run(cell()) == 2


def test_the_clusters_twins_are_derived_with_the_methods_signatures() -> None:
    for name in ("start", "restart", "stop", "scale"):
        twin = getattr(DistCluster, f"{name}_sync")
        method = getattr(DistCluster, name)
        assert inspect.iscoroutinefunction(method) and not inspect.iscoroutinefunction(twin)
        assert twin.__name__ == f"{name}_sync"
        assert inspect.signature(twin) == inspect.signature(method)


def test_a_stopped_twin_of_a_new_cluster_does_nothing() -> None:
    # stop of a cluster never started returns at once (idempotent): through its twin too.
    cluster = DistCluster()
    assert cluster.stop_sync() is None
    assert cluster.state.value == "new"
