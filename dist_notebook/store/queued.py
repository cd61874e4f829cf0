"""A connection to the run store whose writes wait out another program's lock.

A write that cannot get through (SQLite's lock wait ran out, or the disk is full) waits
in the backlog (``backlog.py``) with every write after it, and a thread writes them, in
order, once the store takes writes again. The user is told once per wait, when it starts
(after ``BUSY_MS``: a lock shorter than that is never said). ``close()`` and the
interpreter's exit wait a bounded time for what waits. ``StoreWriter`` (``writer.py``)
builds the store's writes on it.
"""

from __future__ import annotations

import atexit
import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import envvars
from . import backlog
from .backlog import RETRY_MAX_S, RETRY_MIN_S, Backlog, Job, Pending, Statements, nothing
from .ledger import Ledger, take_left
from .location import store_path
from .schema import (
    StoreError,
    StoreLocked,
    columns,
    connect,
    ensure_schema,
    is_full,
    is_locked,
    opening_error,
)

log = logging.getLogger("dist_notebook")

# How long a write waits for another program's lock before it joins the backlog (writes
# of other kernels take milliseconds), and how long each retry of the backlog waits.
BUSY_MS = 5000
RETRY_BUSY_MS = 1000
# How long close() and the interpreter's exit wait for a backlog to be written.
CLOSE_WAIT_S = 10.0
EXIT_WAIT_S = 10.0
DROPPED_EVENT = "store-records-dropped"
# What a run's summary reads (reader.py), kept by the writer as it writes records: without
# them the summary of a 64-rank run of 10^6 records counted and scanned each rank's
# records (over a second on this 2-core machine). One row per rank, updated once a flush:
# its count, first and last step, last finite loss, and the sequence numbers of its last
# WINDOW records ("recent", a JSON list), which the summary reads by their primary key.
# A store made before "recent" had an index (run_id, rank, seq) for that instead; it cost
# ~1-1.5 us a record written (a third of SQLite's part), and new stores are made without
# it (one made earlier keeps it: its older runs' summaries read by it). Made here, by the
# writer (a no-op once there), so every store a kernel writes has them; a reader works
# without.
RANK_FACTS = (
    "CREATE TABLE IF NOT EXISTS metrics_ranks (run_id TEXT NOT NULL, rank INTEGER NOT NULL,"
    " records INTEGER NOT NULL, first_step INTEGER, last_step INTEGER, last_loss REAL,"
    " recent TEXT, PRIMARY KEY (run_id, rank))",
    # A run's facts go with it, whoever deletes it (deleting.py, another version's prune).
    "CREATE TRIGGER IF NOT EXISTS metrics_ranks_gone AFTER DELETE ON runs"
    " BEGIN DELETE FROM metrics_ranks WHERE run_id = old.id; END",
)
RECENT_COLUMN = "ALTER TABLE metrics_ranks ADD COLUMN recent TEXT"  # a table made before it


def _add_recent(conn: sqlite3.Connection) -> None:
    try:
        conn.execute(RECENT_COLUMN)
    except sqlite3.OperationalError as e:
        # Another writer added it between our look and this: what we wanted is there.
        if "duplicate column" not in str(e).lower():
            raise


def _remedy(e: BaseException) -> str:
    """What to do about a failed write, from SQLite's own reason (never a guess)."""
    text = str(e).lower()
    if is_locked(e) or isinstance(e, StoreLocked):
        return "another program holds it locked"
    if is_full(e):
        return f"the disk is full: free space, or set {envvars.STORE} to another disk"
    if "readonly" in text or "read-only" in text:
        return f"it is read-only: set {envvars.STORE} to a file you can write"
    return f"the file is damaged: move it away, or set {envvars.STORE} to another file"


def _retryable(e: BaseException) -> bool:
    """A write that can succeed later: another program's lock, a full disk."""
    return isinstance(e, StoreLocked) or is_locked(e) or is_full(e)


def _dropped_events(dropped: dict[str | None, int], waited: float) -> Statements:
    return [
        (
            "INSERT INTO events (time, run_id, kind, message) VALUES (?, ?, ?, ?)",
            (
                time.time(),
                run_id,
                DROPPED_EVENT,
                f"{count} records of this run were not stored: the run store took no writes"
                f" for {waited:.0f} s and the records waiting in memory are bounded",
            ),
        )
        for run_id, count in dropped.items()
    ]


def _unwritten_events(lost: dict[str, int], why: str) -> Statements:
    """A run's event for the records a writer gone before could not write (ledger.py)."""
    return [
        (
            "INSERT INTO events (time, run_id, kind, message) VALUES (?, ?, ?, ?)",
            (
                time.time(),
                run_id,
                DROPPED_EVENT,
                f"{count} records of this run were not stored: the run store took no writes"
                f" ({why or 'the store did not take writes'}) until its kernel exited",
            ),
        )
        for run_id, count in lost.items()
    ]


def fixed(statements: Statements) -> Job:
    return lambda _conn: statements


class Rows(list):  # type: ignore[type-arg]
    """The parameters of many rows of one statement: written with one ``executemany``
    (a run's records: per row, ``execute`` cost ~3x as much in Python as SQLite's work)."""


class QueuedWriter:
    """One connection, shared by threads (the collector's and the kernel's)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or store_path()
        self._conn: sqlite3.Connection | None = None
        self._schema_ok = False
        self._conn_lock = threading.Lock()  # one transaction at a time on the connection
        self._backlog = Backlog()
        self._retrier: threading.Thread | None = None
        self._closed = threading.Event()
        self._busy_ms = BUSY_MS
        with self._conn_lock:
            try:
                self._connection()
            except StoreLocked as e:  # written once the store is free: open it then
                self._wait(Pending(fixed([])), e)
        # The count of what this writer may fail to write before it ends (ledger.py), and
        # what writers gone before it could not write, said in their runs' events now.
        self._ledger = Ledger(self.path)
        for lost, why in take_left(self.path):
            self._many(_unwritten_events(lost, why))
        _live.add(self)

    # the connection and its transactions --------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        """The open connection, with the tables in place (the caller holds _conn_lock);
        raises StoreError (StoreLocked while another program holds the store)."""
        if self._conn is None:
            self._conn = connect(self.path, create=True, setup=False)
            if self._busy_ms != BUSY_MS:  # asked for before the store could be opened
                self._conn.execute(f"PRAGMA busy_timeout = {int(self._busy_ms)}")
        if not self._schema_ok:
            try:
                ensure_schema(self._conn)
                for ddl in RANK_FACTS:
                    self._conn.execute(ddl)
                if "recent" not in columns(self._conn, "metrics_ranks"):
                    _add_recent(self._conn)
            except sqlite3.DatabaseError as e:
                raise opening_error(self.path, e) from e
            self._schema_ok = True
        return self._conn

    def _attempt(self, items: Sequence[Pending]) -> None:
        """Write *items* in one transaction (the caller holds _conn_lock)."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for item in items:
                for sql, params in item.job(conn):
                    if type(params) is Rows:
                        conn.executemany(sql, params)
                    else:
                        conn.execute(sql, params)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _set_busy(self, ms: int) -> None:
        if ms != self._busy_ms:
            if self._conn is not None:
                self._conn.execute(f"PRAGMA busy_timeout = {int(ms)}")
            self._busy_ms = ms

    def _error(self, e: BaseException) -> StoreError:
        if isinstance(e, StoreError):
            return e
        return StoreError(f"cannot write the run store at {self.path} ({e}); {_remedy(e)}")

    def _submit(
        self, job: Job, *, records: int = 0, size: int = 0, run_id: str | None = None
    ) -> None:
        """Write now, or, while the store does not take writes, after the writes that
        wait already. Raises StoreError only for a store that will not take it later
        (damaged, read-only)."""
        item = Pending(job, records, size or Pending.size, run_id)
        with self._backlog.lock:
            if len(self._backlog):
                self._queue(item, None)
                return
        with self._conn_lock:
            with self._backlog.lock:
                if len(self._backlog):
                    self._queue(item, None)
                    return
            try:
                self._attempt([item])
                return
            except (sqlite3.Error, StoreError) as e:
                if not _retryable(e):
                    raise self._error(e) from e
                reason: BaseException = e
        self._wait(item, reason)

    def _many(self, statements: Statements) -> None:
        self._submit(fixed(statements))

    def _write(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._many([(sql, params)])

    # the backlog --------------------------------------------------------------------
    def _wait(self, item: Pending, reason: BaseException) -> None:
        """*item* could not be written: queue it, say so (once per wait), retry."""
        with self._backlog.lock:
            first = not len(self._backlog)
            self._backlog.reason = _remedy(reason)
            self._queue(item, reason if first else None)

    def _queue(self, item: Pending, reason: BaseException | None) -> None:
        """Queue *item* (the caller holds the backlog's lock), start the retrier."""
        if self._backlog.add(item):
            log.warning(
                "the run store at %s is still not taking writes (%s): the oldest records"
                " waiting in memory are given up to keep it under %d MB; state changes and"
                " the newest records are kept",
                self.path,
                self._backlog.reason,
                backlog.MAX_HELD_BYTES >> 20,
            )
        if reason is not None:
            log.warning(
                "the run store at %s does not take writes now (%s: %s); this kernel keeps"
                " its writes in memory and writes them, in order, once it can",
                self.path,
                reason,
                self._backlog.reason,
            )
        if self._retrier is None and not self._closed.is_set():
            self._retrier = threading.Thread(
                target=self._retry, name="dist-notebook-store-retry", daemon=True
            )
            self._retrier.start()

    def _retry(self) -> None:
        delay = RETRY_MIN_S
        while not self._closed.is_set():
            with self._backlog.lock:
                batch = self._backlog.head()
                if not batch:
                    self._retrier = None
                    return
                waited = time.monotonic() - (self._backlog.since or time.monotonic())
                last = len(batch) == len(self._backlog)
                dropped = self._backlog.take_dropped() if last else {}
            # What was given up is said in the store, in the transaction that ends the wait.
            notes = [Pending(fixed(_dropped_events(dropped, waited)))] if dropped else []
            with self._conn_lock:
                try:
                    self._set_busy(RETRY_BUSY_MS)
                    done = self._write_batch(batch + notes)
                finally:
                    self._set_busy(BUSY_MS)
            with self._backlog.lock:
                if done:
                    self._backlog.written(len(batch))
                    more = bool(len(self._backlog))
                else:
                    for item in batch:
                        item.in_flight = False
                    self._backlog.give_back_dropped(dropped)
            if not done:
                self._closed.wait(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            delay = RETRY_MIN_S
            if not more:
                log.info(
                    "the run store at %s took the writes that waited %.1f s", self.path, waited
                )

    def _write_batch(self, batch: list[Pending]) -> bool:
        """Write *batch* (the caller holds _conn_lock): False while the store still does
        not take writes. A write the store refuses for good is said and given up, alone."""
        try:
            self._attempt(batch)
            return True
        except (sqlite3.Error, StoreError) as e:
            if _retryable(e):
                return False
        except Exception:  # one bad write (a value SQLite cannot hold): found alone below
            log.debug("a batch of waiting writes failed; writing them one by one")
        for item in batch:
            try:
                self._attempt([item])
            except (sqlite3.Error, StoreError) as e:
                if _retryable(e):
                    return False
                log.warning("a write to the run store failed and is given up: %s", self._error(e))
            except Exception as e:  # never the end of the retry thread
                log.warning("a write to the run store failed and is given up: %r", e)
            item.job, item.records = nothing, 0  # in the store (or given up): never again
        return True

    def pending(self) -> int:
        """How many writes wait for the store."""
        with self._backlog.lock:
            return len(self._backlog)

    def flush(self, timeout: float = CLOSE_WAIT_S) -> int:
        """Wait until every waiting write is in the store (at most *timeout* s); returns
        how many are still waiting."""
        return self._backlog.wait_empty(timeout)

    def close(self, timeout: float = CLOSE_WAIT_S) -> None:
        """Write what waits (for at most *timeout* s), then close. Raises StoreError if
        writes are left unwritten (they are lost with this writer)."""
        left = self.flush(timeout)
        self._closed.set()
        retrier = self._retrier
        if retrier is not None:
            retrier.join(timeout=RETRY_BUSY_MS / 1000 + 1)
        with self._conn_lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        _live.discard(self)
        self._end_ledger(left)
        if left:
            raise StoreError(
                f"{left} writes to the run store at {self.path} were not written: it took no"
                f" writes for {timeout:.0f} s ({self._backlog.reason})"
            )

    def _end_ledger(self, left: int) -> None:
        """Nothing left: no ledger. Writes left: their records' count, kept for the next
        writer of the store (the disk may be full now)."""
        if not left:
            self._ledger.discard()
            return
        with self._backlog.lock:
            lost, why = self._backlog.unwritten(), self._backlog.reason
        if any(n for r, n in lost.items() if r) and self._ledger.keep(lost, why):
            log.warning(
                "%d records of this kernel's runs were not written to the run store at %s"
                " (%s): the next program that writes it records how many, in each run",
                sum(n for r, n in lost.items() if r),
                self.path,
                why,
            )
        else:
            self._ledger.discard()

    def _transaction(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run *work* in one write transaction now (deletes: never queued)."""
        with self._conn_lock:
            try:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = work(conn)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                return result
            except (sqlite3.Error, StoreError) as e:
                again = "; try again once it is free" if _retryable(e) else ""
                raise StoreError(
                    f"cannot delete from the run store at {self.path} ({e}); {_remedy(e)}{again}"
                ) from e

    def _before_delete(self) -> None:
        """Writes that wait go first: a delete never runs ahead of a run's last records."""
        if self.flush(CLOSE_WAIT_S):
            raise StoreError(
                f"cannot delete from the run store at {self.path}: it takes no writes now"
                f" ({self._backlog.reason}); try again once it is free"
            )


# Writers of this process with writes that may wait: at exit, each gets a bounded wait.
_live: weakref.WeakSet[QueuedWriter] = weakref.WeakSet()


@atexit.register
def _write_at_exit() -> None:
    deadline = time.monotonic() + EXIT_WAIT_S
    for writer in list(_live):
        left = writer.flush(max(0.0, deadline - time.monotonic()))
        writer._end_ledger(left)
        if left:
            log.warning(
                "%d writes to the run store at %s were not written before exit (%s): runs"
                " of this kernel read as orphaned",
                left,
                writer.path,
                writer._backlog.reason,
            )
