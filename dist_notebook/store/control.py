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

import sqlite3
import time
from pathlib import Path
from typing import Any

from .location import store_path
from .schema import StoreError, connect

ACTIONS = ("interrupt", "stop")

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
    """Requests for one store; each side opens its own (one connection, not threaded)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or store_path()
        self._conn = connect(self.path, create=True)
        self._run(lambda c: c.executescript(_TABLE))

    def close(self) -> None:
        self._conn.close()

    def _run(self, work: Any) -> Any:
        try:
            return work(self._conn)
        except sqlite3.Error as e:
            raise StoreError(f"cannot use the run store at {self.path} ({e})") from e

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
        """The requests for *cluster_id* nobody took yet, oldest first, now taken."""

        def work(c: sqlite3.Connection) -> list[tuple[int, str]]:
            c.execute("BEGIN IMMEDIATE")
            try:
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
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
            return [(r["seq"], r["action"]) for r in rows]

        return self._run(work)  # type: ignore[no-any-return]

    def finish(self, seq: int, result: str, error: str | None = None) -> None:
        self._run(
            lambda c: c.execute(
                "UPDATE control SET done = ?, result = ?, error = ? WHERE seq = ?",
                (time.time(), result, error, seq),
            )
        )
