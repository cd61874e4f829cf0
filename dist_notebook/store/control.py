"""Control requests: the panel asks the kernel that owns a cluster to act on it.

The Jupyter server is not the owner of a cluster; the kernel that started it is. A Stop
or Interrupt from the panel becomes a row here, which the owning kernel's watcher takes,
carries out through its own cluster object (the same code as ``%dist_cluster stop``) and
answers. The table lives in the run store, a file readable and writable by its owner
only, behind the Jupyter server's authentication: only the user's own processes can
add a request.

    server: seq = queue.request(cluster_id, "stop"); ... queue.answer(seq)
    kernel: for seq, action in queue.take(cluster_id): ...; queue.finish(seq, "stopped")
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

from .location import store_path
from .schema import StoreError, StoreLocked, connect, is_locked, opening_error

log = logging.getLogger("dist_notebook")
ACTIONS = ("interrupt", "stop")
# How long the kernel's take waits for another program's lock: about one poll of the
# watcher (dist_notebook/cluster/owner.py), which then looks again.
TAKE_BUSY_MS = 200
BUSY_MS = 5000
TELL_AFTER_S = 5.0  # a lock this long is said (once): as long as a write waits for one

_TABLE = """
CREATE TABLE IF NOT EXISTS control (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster_id TEXT NOT NULL,
    action TEXT NOT NULL,
    requested REAL NOT NULL,
    taken REAL,
    done REAL,
    result TEXT,
    error TEXT
);
CREATE INDEX IF NOT EXISTS control_open ON control (cluster_id, taken);
"""


class ControlQueue:
    """Requests for one store; each side opens its own (one connection, not threaded).

    Another program's lock never ends the owning kernel's side: ``take`` waits for it a
    poll's time and finds nothing meanwhile (said once per lock), ``finish`` keeps the
    answer and writes it at the next ``take``, and a store locked when the queue opens
    is opened, and its table made, once it is free."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or store_path()
        self._conn: sqlite3.Connection | None = None
        self._answers: list[tuple[int, str, str | None, float]] = []
        self._locked_since: float | None = None
        self._told = False
        try:
            self._connection()
        except StoreLocked:
            self._locked("opening it")

    def close(self) -> None:
        if self._answers:
            try:
                self._write_answers(self._connection())
            except StoreError as e:
                log.warning("%d answers to the panel were not written: %s", len(self._answers), e)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = connect(self.path, create=True)
            try:
                conn.executescript(_TABLE)  # writes nothing once the table exists
            except sqlite3.DatabaseError as e:
                conn.close()
                raise opening_error(self.path, e) from e
            self._conn = conn
        return self._conn

    def _run(self, work: Any) -> Any:
        try:
            return work(self._connection())
        except sqlite3.Error as e:
            if is_locked(e):
                raise StoreLocked(f"the run store at {self.path} is locked ({e})") from e
            raise StoreError(f"cannot use the run store at {self.path} ({e})") from e

    def _locked(self, doing: str) -> None:
        """Say once per lock, when it has lasted ``TELL_AFTER_S``, that the panel's
        requests wait for it (a prune's short transactions never make it say so)."""
        now = time.monotonic()
        if self._locked_since is None:
            self._locked_since = now
        elif not self._told and now - self._locked_since >= TELL_AFTER_S:
            self._told = True
            log.warning(
                "the run store at %s is locked by another program (%s): the panel's Stop and"
                " Interrupt reach this kernel once it is free",
                self.path,
                doing,
            )

    def _free(self) -> None:
        if self._told:
            log.info("the run store at %s is free again: the panel reaches this kernel", self.path)
        self._locked_since, self._told = None, False

    # the server's side --------------------------------------------------------
    def request(self, cluster_id: str, action: str) -> int:
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, not {action!r}")
        cur = self._run(
            lambda c: c.execute(
                "INSERT INTO control (cluster_id, action, requested) VALUES (?, ?, ?)",
                (cluster_id, action, time.time()),
            )
        )
        return int(cur.lastrowid)

    def answer(self, seq: int) -> dict[str, Any]:
        """The request as it stands: ``taken`` and ``done`` are None until they happen."""
        rows = self._run(
            lambda c: c.execute("SELECT * FROM control WHERE seq = ?", (seq,)).fetchall()
        )
        return {k: rows[0][k] for k in rows[0].keys()}

    def withdraw(self, seq: int) -> bool:
        """Withdraw a request nobody took (True), so a kernel that wakes up later does not
        act on a request whose answer nobody waits for; False if it was taken already."""
        cur = self._run(
            lambda c: c.execute(
                "UPDATE control SET taken = ?, done = ?, error = 'withdrawn'"
                " WHERE seq = ? AND taken IS NULL",
                (time.time(), time.time(), seq),
            )
        )
        return bool(cur.rowcount)

    # the owning kernel's side -------------------------------------------------
    def take(self, cluster_id: str) -> list[tuple[int, str]]:
        """The requests for *cluster_id* nobody took yet, oldest first, now taken; []
        while another program holds the store (after a wait of ``TAKE_BUSY_MS``)."""

        def work(c: sqlite3.Connection) -> list[tuple[int, str]]:
            c.execute(f"PRAGMA busy_timeout = {TAKE_BUSY_MS}")
            try:
                c.execute("BEGIN IMMEDIATE")
            finally:
                c.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
            try:
                self._write_answers(c, in_transaction=True)
                rows = c.execute(
                    "SELECT seq, action FROM control WHERE cluster_id = ? AND taken IS NULL"
                    " ORDER BY seq",
                    (cluster_id,),
                ).fetchall()
                c.executemany(
                    "UPDATE control SET taken = ? WHERE seq = ?",
                    [(time.time(), r["seq"]) for r in rows],
                )
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
            self._answers.clear()
            return [(r["seq"], r["action"]) for r in rows]

        try:
            taken: list[tuple[int, str]] = self._run(work)
        except StoreLocked:
            self._locked("taking requests")
            return []
        self._free()
        return taken

    def finish(self, seq: int, result: str, error: str | None = None) -> None:
        """Answer request *seq*; while the store is locked the answer waits in memory
        and is written by the next ``take`` (or ``close``)."""
        self._answers.append((seq, result, error, time.time()))
        try:
            self._run(lambda c: self._write_answers(c))
        except StoreLocked:
            self._locked("answering a request")

    def _write_answers(self, c: sqlite3.Connection, in_transaction: bool = False) -> None:
        rows = [(done, result, error, seq) for seq, result, error, done in self._answers]
        if not rows:
            return
        sql = "UPDATE control SET done = ?, result = ?, error = ? WHERE seq = ?"
        if in_transaction:
            c.executemany(sql, rows)
            return
        c.execute("BEGIN IMMEDIATE")
        try:
            c.executemany(sql, rows)
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        c.execute("COMMIT")
        self._answers.clear()
