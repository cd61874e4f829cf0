"""Warm starts: spare clusters started ahead of time, owned by this kernel.

    from dist_notebook.cluster import pool
    pool.keep_warm(ClusterSpec(n=2))     # a spare now, and again after each stop
    %dist_cluster start -n 2 --cpu       # takes the spare: ready in tens of ms

A spare is an ordinary cluster (controller, engines with torch imported, the process
group created and proven by one all_reduce), started on the background loop while the
user does something else, never used by anything until ``%dist_cluster start`` asks for
the same spec and takes it: its ranks' namespaces are as fresh as a cold start's. A spare
still starting is waited for (the wait is what is left of its start).

Bounded and owned: at most ``MAX_SPARES`` spares; each is in the registry (stopped at
interpreter exit) and its processes watch the kernel like any cluster's, so a dead kernel
leaves none behind. A spare is not in the run store (the panel lists clusters in use)
until it is taken. ``DIST_NOTEBOOK_WARM=1`` in the kernel's environment keeps every spec
the kernel starts warm after its first stop (as ``keep_warm`` does).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from .. import envvars
from ..protocol import ClusterState
from . import registry
from .cluster import DistCluster, Progress
from .loop import background_loop
from .spec import ClusterSpec

log = logging.getLogger("dist_notebook")
MAX_SPARES = 1  # spare clusters at a time (each holds n engines with torch loaded)

_lock = threading.Lock()
_spares: list[tuple[_Spare, Future[Any]]] = []
_kept: list[ClusterSpec] = []


class _Spare(DistCluster):
    """A cluster that records nothing in the run store until it is taken."""

    adopted = False

    def writer(self) -> Any:
        return super().writer() if self.adopted else None

    def adopt(self, progress: Progress) -> None:
        self.adopted = True
        self.progress = progress
        self.record_in_store()


def prestart(spec: ClusterSpec) -> bool:
    """Start a spare cluster of *spec* in the background; False when the pool is full."""
    with _lock:
        _drop_failed()
        if len(_spares) >= MAX_SPARES:
            return False
        spare = _Spare(spec)
        future = asyncio.run_coroutine_threadsafe(spare.start(), background_loop())
        _spares.append((spare, future))
    future.add_done_callback(_log_failure)
    return True


def _log_failure(future: Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("a spare cluster failed to start: %s", future.exception())


def _drop_failed() -> None:
    """Forget spares whose start failed (they tore themselves down)."""
    _spares[:] = [(s, f) for s, f in _spares if not (f.done() and (f.cancelled() or f.exception()))]


def take(spec: ClusterSpec, progress: Progress, timeout: float | None = None) -> Any:
    """The spare of *spec*, ready (waiting for the rest of its start), or None."""
    with _lock:
        _drop_failed()
        found = next(((s, f) for s, f in _spares if s.spec == spec), None)
        if found is None:
            return None
        _spares.remove(found)
    spare, future = found
    t0 = time.perf_counter()
    if not future.done():
        progress("taking the warm cluster, still starting")
    try:
        future.result(timeout=timeout if timeout is not None else spec.start_timeout + 90)
    except FutureTimeout:
        spare.stop_sync()
        return None
    except Exception as e:  # its start failed: a cold start says what is wrong
        log.info("spare cluster failed (%s); starting afresh", e)
        return None
    if spare.state != ClusterState.READY or spare.dead_ranks():
        spare.stop_sync()
        return None
    spare.adopt(progress)
    spare.start_seconds = time.perf_counter() - t0
    return spare


def keep_warm(spec: ClusterSpec, now: bool = True) -> None:
    """Keep a spare of *spec*: one now (unless *now* is False), another after each stop."""
    with _lock:
        if spec not in _kept:
            _kept.append(spec)
    if now:
        prestart(spec)


def stopped(spec: ClusterSpec) -> None:
    """A cluster of *spec* stopped: start its replacement spare if the spec is kept warm."""
    if os.environ.get(envvars.WARM) == "1":
        keep_warm(spec, now=False)
    with _lock:
        kept = spec in _kept
    if kept:
        prestart(spec)


registry.on_stopped(stopped)  # an owner's stop (cluster/owner.py) reaches the pool


def spares() -> list[DistCluster]:
    """The spare clusters now (started or starting)."""
    with _lock:
        return [s for s, _ in _spares]


def clear() -> None:
    """Stop every spare and keep nothing warm (also what interpreter exit does)."""
    with _lock:
        taken = list(_spares)
        _spares.clear()
        _kept.clear()
    for spare, future in taken:
        try:
            future.result(timeout=spare.spec.start_timeout + 90)
        except Exception as e:  # a failed start has nothing left to stop; say so
            log.debug("spare cluster: %s", e)
        spare.stop_sync()
