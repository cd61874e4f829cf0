"""Reads the run store; used by the server extension and by ``load_run``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from .location import store_path
from .schema import StoreError, connect


def _row(row: sqlite3.Row) -> dict[str, Any]:
    return {k: row[k] for k in row.keys()}


class StoreReader:
    """Read-only queries; safe to use while the kernel writes (WAL)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or store_path()
        self._conn = connect(self.path, create=False)

    def close(self) -> None:
        self._conn.close()

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        try:
            return [_row(r) for r in self._conn.execute(sql, params).fetchall()]
        except sqlite3.Error as e:
            raise StoreError(f"cannot read the run store at {self.path} ({e})") from e

    # clusters ---------------------------------------------------------------
    def clusters(self) -> list[dict[str, Any]]:
        out = self._query("SELECT * FROM clusters ORDER BY started DESC")
        for c in out:
            c["ranks"] = self.ranks(c["id"])
        return out

    def cluster(self, cluster_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM clusters WHERE id = ?", (cluster_id,))
        if not rows:
            return None
        rows[0]["ranks"] = self.ranks(cluster_id)
        return rows[0]

    def ranks(self, cluster_id: str) -> list[dict[str, Any]]:
        return self._query(
            "SELECT rank, host, pid, device, state, engine_id FROM ranks"
            " WHERE cluster_id = ? ORDER BY rank",
            (cluster_id,),
        )

    # runs -------------------------------------------------------------------
    def runs(self, cluster_id: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT id, name, cluster_id, state, started, ended, steps, error FROM runs"
        clauses, params = [], []
        if cluster_id is not None:
            clauses.append("cluster_id = ?")
            params.append(cluster_id)
        if state is not None:
            clauses.append("state = ?")
            params.append(state)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        return self._query(sql + " ORDER BY started DESC", tuple(params))

    def run(self, run_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            return None
        rows[0]["ranks"] = self._query(
            "SELECT rank, state, error FROM run_ranks WHERE run_id = ? ORDER BY rank", (run_id,)
        )
        return rows[0]

    def find_run(self, name_or_id: str) -> dict[str, Any] | None:
        """The run with this id, else the latest run with this name."""
        found = self.run(name_or_id)
        if found is not None:
            return found
        rows = self._query(
            "SELECT id FROM runs WHERE name = ? ORDER BY started DESC LIMIT 1", (name_or_id,)
        )
        return self.run(rows[0]["id"]) if rows else None

    def metrics(
        self, run_id: str, since: int = 0, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Records after sequence number *since*, in order, each a flat dict."""
        sql = (
            "SELECT seq, rank, step, time, data FROM metrics"
            " WHERE run_id = ? AND seq > ? ORDER BY seq"
        )
        params: tuple[Any, ...] = (run_id, since)
        if limit is not None:
            sql += " LIMIT ?"
            params += (limit,)
        out = []
        for r in self._query(sql, params):
            rec = {"seq": r["seq"], "rank": r["rank"], "step": r["step"], "time": r["time"]}
            rec.update(json.loads(r["data"]))
            out.append(rec)
        return out

    def events(
        self, run_id: str | None = None, cluster_id: str | None = None
    ) -> list[dict[str, Any]]:
        if run_id is not None:
            return self._query("SELECT * FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
        if cluster_id is not None:
            return self._query(
                "SELECT * FROM events WHERE cluster_id = ? ORDER BY seq", (cluster_id,)
            )
        return self._query("SELECT * FROM events ORDER BY seq")
