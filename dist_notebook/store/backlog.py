"""Writes that wait for the run store: another program's lock or a full disk delays them,
never drops them.

A write that cannot get through (SQLite's lock wait ran out, or the disk is full) joins a
first-in, first-out backlog, and so does every write after it: the order of a run's
writes (its row, its records, its final state) is kept, so a transition is never applied
before the row it moves. One thread writes the backlog, oldest first, once the store
takes writes again. Memory is bounded: past ``MAX_HELD_BYTES`` of waiting records the
oldest records are given up (said once, and counted in an event of the run); state
changes and the newest records are always kept.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("dist_notebook")

Statements = list[tuple[str, Sequence[Any]]]
# Makes a write's statements on the connection, when it is written (a job of the
# backlog may read the store then: close_orphans looks at the clusters of that moment;
# a generator may read what its earlier statements wrote: append_rows, their seqs).
Job = Callable[[sqlite3.Connection], Iterable[tuple[str, Sequence[Any]]]]

MAX_HELD_BYTES = 64 << 20  # records kept in memory while the store is locked
STATE_BYTES = 256  # what one state change or event holds, about
BATCH = 256  # backlog writes per transaction
RETRY_MIN_S = 0.05
RETRY_MAX_S = 1.0


@dataclass
class Pending:
    job: Job
    records: int = 0  # records it carries (0: a state change or an event)
    size: int = STATE_BYTES
    run_id: str | None = None
    in_flight: bool = False  # being written: never given up


def nothing(_conn: sqlite3.Connection) -> Statements:
    return []


class Backlog:
    """The writes of one StoreWriter that wait; thread-safe (its own lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self._items: deque[Pending] = deque()
        self._records: deque[Pending] = deque()  # the items that carry records, oldest first
        self.held = 0
        self.dropped: dict[str | None, int] = {}
        self.since: float | None = None  # when the store stopped taking writes
        self.reason = ""

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: Pending) -> bool:
        """Queue *item* (the caller holds ``lock``); True when some records were given
        up to keep memory bounded, the first time in this wait."""
        if self.since is None:
            self.since = time.monotonic()
        self._items.append(item)
        self.held += item.size
        if not item.records:
            return False
        self._records.append(item)
        first_drop = not self.dropped
        dropped = False
        while self.held > MAX_HELD_BYTES:
            # The oldest records not being written now (a batch in flight is at most an
            # eighth of the bound): memory stays under MAX_HELD_BYTES and that eighth.
            i = next((i for i, r in enumerate(self._records) if not r.in_flight), None)
            if i is None or self._records[i] is item:
                break
            oldest = self._records[i]
            del self._records[i]
            self.held -= oldest.size
            self.dropped[oldest.run_id] = self.dropped.get(oldest.run_id, 0) + oldest.records
            # Left in place, empty: the backlog's order and the batch in flight stay as they are.
            oldest.job, oldest.records, oldest.size = nothing, 0, 0
            dropped = True
        return dropped and first_drop

    def head(self) -> list[Pending]:
        """The oldest writes, marked in flight (the caller holds ``lock``): at most BATCH,
        and records of at most an eighth of MAX_HELD_BYTES."""
        batch: list[Pending] = []
        size = 0
        for item in self._items:
            if len(batch) >= BATCH or (batch and size + item.size > MAX_HELD_BYTES // 8):
                break
            item.in_flight = True
            batch.append(item)
            size += item.size
        return batch

    def written(self, count: int) -> None:
        """The *count* oldest writes are in the store (the caller holds ``lock``)."""
        for _ in range(count):
            item = self._items.popleft()
            self.held -= item.size
            if self._records and self._records[0] is item:
                self._records.popleft()
        if not self._items:
            self.since = None
        self.changed.notify_all()

    def wait_empty(self, timeout: float) -> int:
        """Wait until every write is in the store, at most *timeout* s; how many are left."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self._items:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
            return len(self._items)

    def unwritten(self) -> dict[str | None, int]:
        """Records per run that are not in the store: waiting, or given up in this wait
        (the caller holds ``lock``)."""
        counts = dict(self.dropped)
        for item in self._items:
            if item.records:
                counts[item.run_id] = counts.get(item.run_id, 0) + item.records
        return counts

    def give_back_dropped(self, dropped: dict[str | None, int]) -> None:
        """Counts taken for a write that did not get through (the caller holds ``lock``)."""
        for run_id, count in dropped.items():
            self.dropped[run_id] = self.dropped.get(run_id, 0) + count

    def take_dropped(self) -> dict[str | None, int]:
        """Records given up, by run, since the last call (the caller holds ``lock``)."""
        dropped, self.dropped = self.dropped, {}
        return dropped
