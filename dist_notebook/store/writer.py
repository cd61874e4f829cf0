"""Writes to the run store; used by the kernel (and briefly by the server and magics).

Writes are never dropped because another program holds the store: one that cannot get
through waits in the writer's backlog (``backlog.py``) with every write after it, and a
thread writes them, in order, once the store is free. The user is told once per wait,
when it starts. ``close()`` and the interpreter's exit wait a bounded time for them.
Deletes (``delete_runs``, ``prune``) go in small transactions (``deleting.py``), so they
never hold the store for more than a fraction of a second.
"""

from __future__ import annotations

import atexit
import json
import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..protocol import (
    ClusterState,
    EngineState,
    Record,
    RunRankState,
    RunState,
    is_final,
    json_value,
    predecessors,
)
from . import backlog, deleting
from .backlog import (
    RETRY_MAX_S,
    RETRY_MIN_S,
    Backlog,
    Job,
    Pending,
    Statements,
    nothing,
)
from .location import store_path
from .schema import (
    StoreError,
    StoreLocked,
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
# Cluster states with processes that a kernel still owns.
LIVE_CLUSTER = ("new", "starting", "ready", "degraded", "restarting", "stopping")
DROPPED_EVENT = "store-records-dropped"
# A run left unfinished this long after its cluster ended is orphaned (reader.py reads it so).
ENDED_GRACE_S = 30.0
_INSERT_RECORD = (
    "INSERT INTO metrics (run_id, rank, step, time, data, step_time, comm_time, samples, gpu)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def orphan_reason(kernel_pid: int | None) -> str:
    return f"its kernel (pid {kernel_pid}) exited before the run ended"


def _guarded_cluster(
    cluster_id: str, state: ClusterState, backend: str | None, now: float | None
) -> tuple[str, Sequence[Any]]:
    allowed = predecessors(state, ClusterState)
    ended = state in (ClusterState.STOPPED, ClusterState.FAILED, ClusterState.ORPHANED)
    stopped = now if ended else None
    return (
        "UPDATE clusters SET state = ?, backend = COALESCE(?, backend),"
        " stopped = COALESCE(?, stopped) WHERE id = ?"
        f" AND state IN ({', '.join('?' * len(allowed))})",
        (state.value, backend, stopped, cluster_id, *allowed),
    )


def _remedy(e: BaseException) -> str:
    """What to do about a failed write, from SQLite's own reason (never a guess)."""
    text = str(e).lower()
    if is_locked(e) or isinstance(e, StoreLocked):
        return "another program holds it locked; it is written once that ends"
    if is_full(e):
        return "the disk is full: free space, or set DIST_NOTEBOOK_STORE to another disk"
    if "readonly" in text or "read-only" in text:
        return "it is read-only: set DIST_NOTEBOOK_STORE to a file you can write"
    return "the file is damaged: move it away, or set DIST_NOTEBOOK_STORE to another file"


def _retryable(e: BaseException) -> bool:
    """A write that can succeed later: another program's lock, a full disk."""
    return isinstance(e, StoreLocked) or is_locked(e) or is_full(e)


def _orphan_statements(conn: sqlite3.Connection, alive: Callable[[int], bool]) -> Statements:
    rows = conn.execute(
        "SELECT id, kernel_pid FROM clusters WHERE state IN"
        f" ({', '.join('?' * len(LIVE_CLUSTER))})",
        LIVE_CLUSTER,
    ).fetchall()
    now = time.time()
    stmts: Statements = []
    for r in rows:
        cluster_id, pid = r["id"], r["kernel_pid"]
        if not pid or alive(pid):
            continue
        stmts += [
            _guarded_cluster(cluster_id, ClusterState.ORPHANED, None, now),
            ("UPDATE ranks SET state = 'stopped' WHERE cluster_id = ?", (cluster_id,)),
            (
                "UPDATE runs SET state = 'orphaned', ended = ?, error = ? WHERE"
                " cluster_id = ? AND state IN ('pending', 'running')",
                (now, orphan_reason(pid), cluster_id),
            ),
            (
                "UPDATE run_ranks SET state = 'cancelled' WHERE state IN ('pending',"
                " 'running') AND run_id IN (SELECT id FROM runs WHERE cluster_id = ?)",
                (cluster_id,),
            ),
        ]
    return stmts


def _ended_cluster_statements() -> Statements:
    """Unfinished runs of clusters that ended long ago are orphaned (what reads show)."""
    ended = (
        "SELECT id FROM clusters WHERE state IN ('stopped', 'failed', 'orphaned')"
        " AND COALESCE(stopped, started) < ?"
    )
    before = time.time() - ENDED_GRACE_S
    return [
        (
            "UPDATE run_ranks SET state = 'cancelled' WHERE state IN ('pending', 'running')"
            " AND run_id IN (SELECT id FROM runs WHERE state IN ('pending', 'running')"
            f" AND cluster_id IN ({ended}))",
            (before,),
        ),
        (
            "UPDATE runs SET state = 'orphaned', ended = COALESCE(ended, ?),"
            " error = COALESCE(error, 'its cluster ended and the run''s end was never recorded')"
            f" WHERE state IN ('pending', 'running') AND cluster_id IN ({ended})",
            (time.time(), before),
        ),
    ]


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


def _fixed(statements: Statements) -> Job:
    return lambda _conn: statements


class StoreWriter:
    """A thread-safe writer: the collector thread and the kernel's thread share it."""

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
                self._wait(Pending(_fixed([])), e)
        _live.add(self)

    # the connection and its transactions --------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        """The open connection, with the tables in place (the caller holds _conn_lock);
        raises StoreError (StoreLocked while another program holds the store)."""
        if self._conn is None:
            self._conn = connect(self.path, create=True, setup=False)
            self._busy_ms = BUSY_MS
        if not self._schema_ok:
            try:
                ensure_schema(self._conn)
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
                    conn.execute(sql, params)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _set_busy(self, ms: int) -> None:
        if self._conn is not None and ms != self._busy_ms:
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
        self._submit(_fixed(statements))

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
                "the run store at %s does not take writes now (%s); %s: this kernel keeps"
                " its writes in memory and writes them, in order, as soon as it can",
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
            notes = [Pending(_fixed(_dropped_events(dropped, waited)))] if dropped else []
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
        for item in batch:
            try:
                self._attempt([item])
            except (sqlite3.Error, StoreError) as e:
                if _retryable(e):
                    return False
                log.warning("a write to the run store failed and is given up: %s", self._error(e))
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
        if left:
            raise StoreError(
                f"{left} writes to the run store at {self.path} were not written: it took no"
                f" writes for {timeout:.0f} s ({self._backlog.reason})"
            )

    # clusters ---------------------------------------------------------------
    def close_orphans(self, alive: Callable[[int], bool]) -> int:
        """Mark clusters whose kernel is gone ``orphaned``, with their unfinished runs.

        A kernel killed mid-run cannot record the end of its cluster or run; whoever reads
        the store next (a kernel, the server, ``%dist_runs``) does, so history never shows
        them running forever. *alive(pid)* says whether a kernel pid still runs. Moves only
        along the protocol's transitions. Returns how many clusters were marked (0 while
        the store does not take writes: it is done once it does).
        """
        marked: list[int] = []

        def job(conn: sqlite3.Connection) -> Statements:
            stmts = _orphan_statements(conn, alive)
            marked.append(len(stmts) // 4)
            return stmts + _ended_cluster_statements()

        if not self._anything_to_close(alive):
            return 0
        self._submit(job)
        return marked[-1] if marked else 0

    def _anything_to_close(self, alive: Callable[[int], bool]) -> bool:
        """Whether close_orphans has work (a read; True when the store cannot be read
        now, so the write is queued and decides then)."""
        with self._conn_lock:
            try:
                conn = self._connection()
                if _orphan_statements(conn, alive):
                    return True
                stuck = conn.execute(
                    "SELECT 1 FROM runs WHERE state IN ('pending', 'running') AND cluster_id IN"
                    " (SELECT id FROM clusters WHERE state IN ('stopped', 'failed', 'orphaned')"
                    " AND COALESCE(stopped, started) < ?) LIMIT 1",
                    (time.time() - ENDED_GRACE_S,),
                ).fetchall()
                return bool(stuck)
            except (sqlite3.Error, StoreError):
                return True

    def add_cluster(
        self,
        cluster_id: str,
        *,
        n: int,
        backend: str | None,
        kernel_pid: int,
        profile_dir: str,
        ipp_cluster_id: str,
    ) -> None:
        self._write(
            "INSERT OR REPLACE INTO clusters (id, state, backend, n, started, kernel_pid,"
            " profile_dir, ipp_cluster_id) VALUES (?, 'starting', ?, ?, ?, ?, ?, ?)",
            (cluster_id, backend, n, time.time(), kernel_pid, profile_dir, ipp_cluster_id),
        )

    def set_cluster_state(self, cluster_id: str, state: str, backend: str | None = None) -> None:
        """Move the cluster to *state* along the protocol's transitions only: a state
        written by another process (the server's ``orphaned``, a ``stopped``) is never
        overwritten by this one's stale view."""
        self._many([_guarded_cluster(cluster_id, ClusterState(state), backend, time.time())])

    def set_ranks(self, cluster_id: str, ranks: Iterable[Mapping[str, Any]]) -> None:
        stmts: list[tuple[str, Sequence[Any]]] = [
            ("DELETE FROM ranks WHERE cluster_id = ?", (cluster_id,))
        ]
        for r in ranks:
            stmts.append(
                (
                    "INSERT INTO ranks (cluster_id, rank, host, pid, device, state, engine_id,"
                    " node_rank) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        cluster_id,
                        r["rank"],
                        r.get("host"),
                        r.get("pid"),
                        r.get("device"),
                        r.get("state", "idle"),
                        r.get("engine_id"),
                        r.get("node_rank"),
                    ),
                )
            )
        self._many(stmts)

    def set_rank_state(self, cluster_id: str, rank: int, state: str) -> None:
        """Move a rank to *state* along EngineState's transitions only."""
        allowed = predecessors(state, EngineState)
        self._write(
            "UPDATE ranks SET state = ? WHERE cluster_id = ? AND rank = ?"
            f" AND state IN ({', '.join('?' * len(allowed))})",
            (state, cluster_id, rank, *allowed),
        )

    # runs -------------------------------------------------------------------
    def add_run(
        self,
        run_id: str,
        *,
        name: str,
        cluster_id: str,
        ranks: Iterable[int],
        steps: int | None,
        code: str,
    ) -> None:
        stmts: list[tuple[str, Sequence[Any]]] = [
            (
                "INSERT INTO runs (id, name, cluster_id, state, started, steps, code)"
                " VALUES (?, ?, ?, 'pending', ?, ?, ?)",
                (run_id, name, cluster_id, time.time(), steps, code),
            )
        ]
        for rank in ranks:
            stmts.append(
                (
                    "INSERT INTO run_ranks (run_id, rank, state) VALUES (?, ?, 'pending')",
                    (run_id, rank),
                )
            )
        self._many(stmts)

    def set_run_state(self, run_id: str, state: str, error: str | None = None) -> None:
        """Move the run to *state*, only along the protocol's transitions: a final state
        (succeeded, failed, cancelled, orphaned) is never overwritten by a late writer."""
        ended = time.time() if is_final(state, RunState) else None
        allowed = predecessors(state, RunState)
        self._write(
            "UPDATE runs SET state = ?, ended = COALESCE(?, ended), error = COALESCE(?, error)"
            f" WHERE id = ? AND state IN ({', '.join('?' * len(allowed))})",
            (state, ended, error, run_id, *allowed),
        )

    def set_run_rank(self, run_id: str, rank: int, state: str, error: str | None = None) -> None:
        allowed = predecessors(state, RunRankState)
        self._write(
            "UPDATE run_ranks SET state = ?, error = COALESCE(?, error)"
            f" WHERE run_id = ? AND rank = ? AND state IN ({', '.join('?' * len(allowed))})",
            (state, error, run_id, rank, *allowed),
        )

    def append_metrics(self, run_id: str, records: Iterable[Record]) -> None:
        """Append records in one transaction; user metrics as JSON (valid JSON: non-finite
        values as "nan"/"inf"/"-inf"), the system's fields in their own columns."""
        rows = [
            (
                run_id,
                rec.rank,
                rec.step,
                rec.time,
                json.dumps({k: json_value(v) for k, v in rec.metrics.items()}),
                rec.step_time,
                rec.comm_time,
                rec.samples,
                None if rec.gpu is None else json.dumps(rec.gpu),
            )
            for rec in records
        ]
        if not rows:
            return
        stmts: Statements = [(_INSERT_RECORD, row) for row in rows]
        size = sum(96 + len(row[4]) + len(row[8] or "") for row in rows)
        self._submit(_fixed(stmts), records=len(rows), size=size, run_id=run_id)

    # deleting ---------------------------------------------------------------
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

    def delete_runs(self, run_ids: Sequence[str]) -> int:
        """Delete runs with their ranks, records and events, in small transactions;
        returns how many were in the store."""
        if not run_ids:
            return 0
        self._before_delete()
        return deleting.delete_runs(self._transaction, run_ids)

    def prune(self, before: float) -> tuple[int, int]:
        """Delete ended runs started before *before* (epoch seconds), then ended clusters
        stopped before it that have no run left; returns (runs, clusters) deleted."""
        self._before_delete()
        finals = [s.value for s in RunState if is_final(s, RunState)]
        rows = self._transaction(
            lambda c: c.execute(
                "SELECT id FROM runs WHERE started < ?"
                f" AND state IN ({', '.join('?' * len(finals))}) ORDER BY started",
                (before, *finals),
            ).fetchall()
        )
        runs = deleting.delete_runs(self._transaction, [r["id"] for r in rows])
        ids = self._transaction(
            lambda c: [
                r["id"]
                for r in c.execute(
                    "SELECT id FROM clusters WHERE state IN ('stopped', 'failed', 'orphaned')"
                    " AND COALESCE(stopped, started) < ?"
                    " AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.cluster_id = clusters.id)",
                    (before,),
                ).fetchall()
            ]
        )
        return runs, deleting.delete_clusters(self._transaction, ids)

    def add_event(
        self,
        kind: str,
        message: str = "",
        *,
        cluster_id: str | None = None,
        run_id: str | None = None,
        rank: int | None = None,
    ) -> None:
        self._write(
            "INSERT INTO events (time, cluster_id, run_id, rank, kind, message)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (time.time(), cluster_id, run_id, rank, kind, message),
        )


# Writers of this process with writes that may wait: at exit, each gets a bounded wait.
_live: weakref.WeakSet[StoreWriter] = weakref.WeakSet()


@atexit.register
def _write_at_exit() -> None:
    deadline = time.monotonic() + EXIT_WAIT_S
    for writer in list(_live):
        left = writer.flush(max(0.0, deadline - time.monotonic()))
        if left:
            log.warning(
                "%d writes to the run store at %s were not written before exit (%s): runs"
                " of this kernel read as orphaned",
                left,
                writer.path,
                writer._backlog.reason,
            )
