"""Writes to the run store; used by the kernel only."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
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
from .location import store_path
from .schema import StoreError, connect

# How long a write waits for another program's lock: normally (writes of other kernels
# take milliseconds), and while the store is known to be held (so a locked store delays
# each write of a run by 0.1 s, not 5 s, until a write gets through again).
BUSY_MS = 5000
BUSY_MS_WHILE_LOCKED = 100
# Cluster states with processes that a kernel still owns.
LIVE_CLUSTER = ("new", "starting", "ready", "degraded", "restarting", "stopping")


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


def _remedy(e: sqlite3.Error) -> str:
    """What to do about a failed write, from SQLite's own reason (never a guess)."""
    text = str(e).lower()
    if "locked" in text or "busy" in text:
        return "another program holds it locked; it is written again once that ends"
    if "full" in text:
        return "the disk is full: free space, or set DIST_NOTEBOOK_STORE to another disk"
    if "readonly" in text or "read-only" in text:
        return "it is read-only: set DIST_NOTEBOOK_STORE to a file you can write"
    return "the file is damaged: move it away, or set DIST_NOTEBOOK_STORE to another file"


class StoreWriter:
    """A thread-safe writer: the collector thread and the kernel's thread share it."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or store_path()
        self._conn = connect(self.path, create=True)
        self._lock = threading.Lock()
        self._busy_ms = BUSY_MS

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _write(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._many([(sql, params)])

    def _many(self, statements: Iterable[tuple[str, Sequence[Any]]]) -> None:
        try:
            with self._lock:
                try:
                    self._conn.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as e:
                    if "locked" in str(e) or "busy" in str(e):
                        self._set_busy(BUSY_MS_WHILE_LOCKED)
                    raise
                self._set_busy(BUSY_MS)
                try:
                    for sql, params in statements:
                        self._conn.execute(sql, params)
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise StoreError(
                f"cannot write the run store at {self.path} ({e}); {_remedy(e)}"
            ) from e

    def _set_busy(self, ms: int) -> None:
        if ms != self._busy_ms:
            self._conn.execute(f"PRAGMA busy_timeout = {int(ms)}")
            self._busy_ms = ms

    # clusters ---------------------------------------------------------------
    def close_orphans(self, alive: Callable[[int], bool]) -> int:
        """Mark clusters whose kernel is gone ``orphaned``, with their unfinished runs.

        A kernel killed mid-run cannot record the end of its cluster or run; whoever reads
        the store next (a kernel, the server, ``%dist_runs``) does, so history never shows
        them running forever. *alive(pid)* says whether a kernel pid still runs. Moves only
        along the protocol's transitions. Returns how many clusters were marked.
        """
        rows = self._conn.execute(
            "SELECT id, kernel_pid FROM clusters WHERE state IN"
            f" ({', '.join('?' * len(LIVE_CLUSTER))})",
            LIVE_CLUSTER,
        ).fetchall()
        gone = [
            (r["id"], r["kernel_pid"])
            for r in rows
            if r["kernel_pid"] and not alive(r["kernel_pid"])
        ]
        now = time.time()
        stmts: list[tuple[str, Sequence[Any]]] = []
        for cluster_id, pid in gone:
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
        if stmts:
            self._many(stmts)
        return len(gone)

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
        self._many(
            [
                (
                    "INSERT INTO metrics (run_id, rank, step, time, data, step_time, comm_time,"
                    " samples, gpu) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                for row in rows
            ]
        )

    # deleting ---------------------------------------------------------------
    def delete_runs(self, run_ids: Sequence[str]) -> int:
        """Delete runs with their ranks, records and events; returns how many."""
        if not run_ids:
            return 0
        marks = ", ".join("?" * len(run_ids))
        self._many(
            [
                (f"DELETE FROM {table} WHERE run_id IN ({marks})", tuple(run_ids))
                for table in ("metrics", "run_ranks", "events")
            ]
            + [(f"DELETE FROM runs WHERE id IN ({marks})", tuple(run_ids))]
        )
        return len(run_ids)

    def prune(self, before: float) -> tuple[int, int]:
        """Delete ended runs started before *before* (epoch seconds), then ended clusters
        stopped before it that have no run left; returns (runs, clusters) deleted."""
        finals = [s.value for s in RunState if is_final(s, RunState)]
        with self._lock:
            rows = self._conn.execute(
                "SELECT id FROM runs WHERE started < ?"
                f" AND state IN ({', '.join('?' * len(finals))})",
                (before, *finals),
            ).fetchall()
        runs = self.delete_runs([r["id"] for r in rows])
        gone = ("stopped", "failed", "orphaned")
        with self._lock:
            ids = [
                r["id"]
                for r in self._conn.execute(
                    "SELECT id FROM clusters WHERE state IN (?, ?, ?)"
                    " AND COALESCE(stopped, started) < ?"
                    " AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.cluster_id = clusters.id)",
                    (*gone, before),
                ).fetchall()
            ]
        if ids:
            marks = ", ".join("?" * len(ids))
            self._many(
                [
                    (f"DELETE FROM {table} WHERE {key} IN ({marks})", tuple(ids))
                    for table, key in (
                        ("ranks", "cluster_id"),
                        ("events", "cluster_id"),
                        ("clusters", "id"),
                    )
                ]
            )
        return runs, len(ids)

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
