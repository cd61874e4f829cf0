"""A live exporter: a sink for the collector that writes from a thread of its own.

The collector hands every new batch of records to its sinks on its own thread, which
also feeds the dashboard and the run store; a sink that waited on a disk or a tracking
server would slow all of that. ``ExportWorker.__call__`` only appends the batch to a
bounded queue (O(1), under a lock held for microseconds, and no wake-up); its thread
writes what queued every ``WRITE_EVERY`` seconds (one wake-up for many batches: at 50
batches a second, 11-14 ms of CPU for 580 records against 40-42 ms waking for each
batch; bench/export_overhead.py), flushes every
``FLUSH_EVERY`` seconds (so TensorBoard shows the curves grow) and, on ``close()``,
writes what is left and the run's final state.

Failures never reach training: the first exception of the target (disk full, directory
read-only, tracking server down) is logged once as a warning that says how to export
the stored run later, and the worker stops writing. The run store has every record
regardless. If the target falls so far behind that ``MAX_QUEUED`` records wait, later
batches are dropped from the export (counted, warned once), never from the store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from ..protocol import Record
from .base import LocationCallback, Target

log = logging.getLogger("dist_notebook")
WRITE_EVERY = 0.25  # seconds between the writer's wake-ups
FLUSH_EVERY = 1.0  # seconds; TensorBoard itself reloads every 5 s by default
MAX_QUEUED = 200_000  # records waiting for the target (about 100 MB at most)
CLOSE_TIMEOUT = 60.0  # seconds close() waits for the last writes


class ExportWorker:
    def __init__(
        self,
        target: Target,
        on_location: LocationCallback | None = None,
        max_queued: int = MAX_QUEUED,
        flush_every: float = FLUSH_EVERY,
    ) -> None:
        self.target = target
        self.max_queued = max_queued
        self.flush_every = flush_every
        self.location: dict[str, Any] | None = None
        self.failed: str | None = None
        self.written = 0
        self.dropped = 0
        self.cpu_s = 0.0  # CPU time of the writer thread so far (what the export costs)
        self._on_location = on_location
        self._batches: deque[list[Record]] = deque()
        self._queued = 0
        self._closing: tuple[str, str | None] | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(
            target=self._loop, name=f"dist-notebook-{target.tool}", daemon=True
        )
        self._thread.start()

    # the collector's thread -------------------------------------------------------------
    def __call__(self, batch: list[Record]) -> None:
        """Queue *batch* for the writer thread; never blocks on the target."""
        with self._cond:
            if self.failed is not None or self._closing is not None:
                return
            if self._queued + len(batch) > self.max_queued:
                if not self.dropped:
                    log.warning(
                        "%s falls behind: records beyond %d waiting are left out of the "
                        "export (the run store keeps them; %s writes them all)",
                        self.target.describe(),
                        self.max_queued,
                        self.target.again(),
                    )
                self.dropped += len(batch)
                return
            self._batches.append(batch)
            self._queued += len(batch)

    # the writer's thread ----------------------------------------------------------------
    def _loop(self) -> None:
        started = self._guard(self._start)
        last_flush = time.monotonic()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closing is not None, timeout=WRITE_EVERY)
                batches = list(self._batches)
                self._batches.clear()
                self._queued = 0
                closing = self._closing
            if started and batches and self.failed is None:
                records = [rec for batch in batches for rec in batch]
                if self._guard(self.target.write, records):
                    self.written += len(records)
            due = time.monotonic() - last_flush >= self.flush_every
            if started and self.failed is None and due and closing is None:
                self._guard(self.target.flush)
                last_flush = time.monotonic()
            if closing is not None:
                if started and self.failed is None:
                    self._guard(self.target.finish, *closing)
                if self.failed is not None:
                    self.target.abort()
                self.cpu_s = time.thread_time()
                return
            self.cpu_s = time.thread_time()

    def _start(self) -> None:
        self.location = self.target.start()
        if self._on_location is not None:
            self._on_location(self.location)

    def _guard(self, fn: Any, *args: Any) -> bool:
        """Call fn(*args); on an exception, turn the export off with one warning."""
        try:
            fn(*args)
            return True
        except Exception as e:  # any failure of the target: never training's problem
            with self._cond:
                first = self.failed is None
                self.failed = f"{type(e).__name__}: {e}"
                self._batches.clear()
                self._queued = 0
            if first:
                log.warning(
                    "%s failed and is turned off (%s); training goes on and the run store "
                    "keeps every record: %s exports the run once the cause is fixed",
                    self.target.describe(),
                    self.failed,
                    self.target.again(),
                )
            return False

    def close(self, state: str, error: str | None = None, timeout: float = CLOSE_TIMEOUT) -> None:
        """Write what is queued and the final *state*; wait at most *timeout* seconds."""
        with self._cond:
            if self._closing is None:
                self._closing = (state, error)
            self._cond.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning(
                "%s has not finished after %.0f s; it goes on in the background",
                self.target.describe(),
                timeout,
            )
