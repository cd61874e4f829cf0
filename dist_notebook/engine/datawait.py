"""How long a rank's step waited for its data: the time inside DataLoader iterators' next().

While a run is on, torch's DataLoader iterators (every kind: one process, worker
processes; they share one ``__next__``) are timed on the thread that calls them, and each
``report()`` takes that thread's total since the previous report as the record's
``data_time`` (None when the step took no batch from a DataLoader: a loop over a list or a
generator of its own, which report() cannot see; ``report(data_time=...)`` says it then).
With worker processes the time is the wait for a batch that was not ready; with none, the
loading itself. Cost: two clock reads and a dict update a batch (~1 us).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .. import privates

_waits: dict[int, list[float]] = {}  # thread ident -> [seconds in next(), calls]
_original: Any = None


def install() -> None:
    """Time DataLoader iterators from now on (a run's start)."""
    global _original
    if _original is not None:
        return
    try:
        iterator = privates.dataloader_iterator_class()
    except ImportError:  # no torch on this rank: nothing to time
        return
    original = _original = iterator.__next__
    clock, ident = time.perf_counter, threading.get_ident

    def __next__(self: Any) -> Any:
        start = clock()
        try:
            return original(self)
        finally:
            wait = _waits.get(ident())
            if wait is None:
                wait = _waits[ident()] = [0.0, 0.0]
            wait[0] += clock() - start
            wait[1] += 1

    iterator.__next__ = __next__


def uninstall() -> None:
    global _original
    if _original is not None:
        privates.dataloader_iterator_class().__next__ = _original
        _original = None
    _waits.clear()


def take() -> float | None:
    """Seconds this thread spent in DataLoader next() since its last take (None: no call)."""
    wait = _waits.pop(threading.get_ident(), None)
    return None if wait is None else wait[0]
