"""Writes to the run store; used by the kernel only."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..protocol import Record, RunRankState, RunState, is_final, json_value, predecessors
from .location import store_path
from .schema import StoreError, connect

# How long a write waits for another program's lock: normally (writes of other kernels
# take milliseconds), and while the store is known to be held (so a locked store delays
# each write of a run by 0.1 s, not 5 s, until a write gets through again).
BUSY_MS = 5000
BUSY_MS_WHILE_LOCKED = 100


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
                f"cannot write the run store at {self.path} ({e}); another program may "
                "hold it locked, or the disk is full"
            ) from e

    def _set_busy(self, ms: int) -> None:
        if ms != self._busy_ms:
            self._conn.execute(f"PRAGMA busy_timeout = {int(ms)}")
            self._busy_ms = ms

    # clusters ---------------------------------------------------------------
    def close_orphans(self, alive: Callable[[int], bool]) -> int:
        """Mark clusters (and their runs) whose kernel is gone as stopped (failed).

        A kernel killed mid-run cannot record the end of its cluster or run; the next
        kernel that opens the store does, so history never shows them running forever.
        *alive(pid)* says whether a kernel pid still runs. Returns how many were closed.
        """
        rows = self._conn.execute(
            "SELECT id, kernel_pid FROM clusters WHERE state NOT IN ('stopped', 'failed')"
        ).fetchall()
        gone = [r["id"] for r in rows if r["kernel_pid"] and not alive(r["kernel_pid"])]
        now = time.time()
        stmts: list[tuple[str, Sequence[Any]]] = []
        for cluster_id in gone:
            stmts += [
                (
                    "UPDATE clusters SET state = 'stopped', stopped = ? WHERE id = ?",
                    (now, cluster_id),
                ),
                ("UPDATE ranks SET state = 'stopped' WHERE cluster_id = ?", (cluster_id,)),
                (
                    "UPDATE runs SET state = 'orphaned', ended = ?, error = 'the kernel exited"
                    " during the run' WHERE cluster_id = ? AND state IN ('pending', 'running')",
                    (now, cluster_id),
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
        stopped = time.time() if state in ("stopped", "failed") else None
        self._write(
            "UPDATE clusters SET state = ?, backend = COALESCE(?, backend), stopped = ?"
            " WHERE id = ?",
            (state, backend, stopped, cluster_id),
        )

    def set_ranks(self, cluster_id: str, ranks: Iterable[Mapping[str, Any]]) -> None:
        stmts: list[tuple[str, Sequence[Any]]] = [
            ("DELETE FROM ranks WHERE cluster_id = ?", (cluster_id,))
        ]
        for r in ranks:
            stmts.append(
                (
                    "INSERT INTO ranks (cluster_id, rank, host, pid, device, state, engine_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        cluster_id,
                        r["rank"],
                        r.get("host"),
                        r.get("pid"),
                        r.get("device"),
                        r.get("state", "idle"),
                        r.get("engine_id"),
                    ),
                )
            )
        self._many(stmts)

    def set_rank_state(self, cluster_id: str, rank: int, state: str) -> None:
        self._write(
            "UPDATE ranks SET state = ? WHERE cluster_id = ? AND rank = ?",
            (state, cluster_id, rank),
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
            )
            for rec in records
        ]
        if not rows:
            return
        self._many(
            [
                (
                    "INSERT INTO metrics (run_id, rank, step, time, data, step_time, comm_time,"
                    " samples) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                for row in rows
            ]
        )

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
