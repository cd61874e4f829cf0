"""Reads the run store; used by the server extension and by ``load_run``."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import psutil

from .. import protocol
from ..protocol import Record, RunSummary
from .location import store_path
from .schema import V4_COLUMNS, StoreError, columns, connect, metrics_columns
from .writer import ENDED_GRACE_S, LIVE_CLUSTER, orphan_reason

# Fields that version 1 of the store kept inside `data` with the user's metrics.
_V1_SYSTEM = ("step_time", "comm_time", "samples")


def ended_reason(cluster_state: str) -> str:
    return f"its cluster is {cluster_state} and the run's end was never recorded"


def _row(row: sqlite3.Row) -> dict[str, Any]:
    return {k: row[k] for k in row.keys()}


def kernel_alive(pid: int | None, started: float | None = None) -> bool:
    """Whether the kernel *pid* that started a cluster at *started* still runs here (a
    process that took the pid over after the kernel exited is younger than the cluster)."""
    if not pid:
        return True  # unknown owner: never guess it dead
    try:
        proc = psutil.Process(pid)
        created = proc.create_time()
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False  # killed, not yet reaped by its parent: it runs no more
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.Error:
        return True  # not ours to inspect: it exists
    return started is None or created <= started + 1.0


DETACHED_EVENT = "detached"  # {"keeper": pid, "idle_timeout": seconds or null}


class StoreReader:
    """Read-only queries; safe to use while the kernel writes (WAL)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or store_path()
        self._conn = connect(self.path, create=False)
        self._sys_columns: bool | None = None
        self._measure_columns = False
        self._recent_column: bool | None = None  # metrics_ranks has "recent" (writer.py)
        self._node_column: bool | None = None

    def close(self) -> None:
        self._conn.close()

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        try:
            return [_row(r) for r in self._conn.execute(sql, params).fetchall()]
        except sqlite3.Error as e:
            raise StoreError(f"cannot read the run store at {self.path} ({e})") from e

    # orphans ----------------------------------------------------------------
    def orphaned(self) -> dict[str, int]:
        """Clusters the store calls live whose kernel is gone: {cluster id: kernel pid}.

        Every read shows them (and their unfinished runs) as ``orphaned`` at once, even
        before anyone writes it (``StoreWriter.close_orphans`` does; a read-only store
        is never written)."""
        rows = self._query(
            "SELECT id, kernel_pid, started FROM clusters"
            f" WHERE state IN ({', '.join('?' * len(LIVE_CLUSTER))})",
            LIVE_CLUSTER,
        )
        return {
            r["id"]: r["kernel_pid"]
            for r in rows
            if not kernel_alive(r["kernel_pid"], r["started"])
        }

    def _mark_clusters(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        gone = self.orphaned() if rows else {}
        detached = self._detached({c["id"] for c in rows})
        for c in rows:
            if c["id"] in gone:
                c["state"] = protocol.ClusterState.ORPHANED.value
            # A detached cluster's keeper (detached/keeper.py): its pid and idle timeout.
            c["detached"] = detached.get(c["id"])
        return rows

    def _detached(self, cluster_ids: set[str]) -> dict[str, dict[str, Any]]:
        if not cluster_ids:
            return {}
        ids = sorted(cluster_ids)
        rows = self._query(
            f"SELECT cluster_id, message FROM events WHERE kind = '{DETACHED_EVENT}'"
            f" AND cluster_id IN ({', '.join('?' * len(ids))}) ORDER BY seq",
            tuple(ids),
        )
        return {r["cluster_id"]: json.loads(r["message"]) for r in rows}

    def _mark_runs(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Unfinished runs whose owner is gone read as ``orphaned``: their kernel exited,
        or their cluster ended more than ``ENDED_GRACE_S`` ago (a run cannot go on without
        its cluster; its end was never written, as by a kernel before the store kept
        writes it could not make at once, and it would read ``running`` forever)."""
        live = ("pending", "running")
        unfinished = [r for r in rows if r["state"] in live]
        if not unfinished:
            return rows
        gone = self.orphaned()
        ended = self._ended_clusters({r["cluster_id"] for r in unfinished} - set(gone))
        for r in unfinished:
            if r["cluster_id"] in gone:
                r["state"] = protocol.RunState.ORPHANED.value
                r["error"] = orphan_reason(gone[r["cluster_id"]])
            elif r["cluster_id"] in ended:
                r["state"] = protocol.RunState.ORPHANED.value
                r["error"] = ended_reason(ended[r["cluster_id"]])
        return rows

    def _ended_clusters(self, cluster_ids: set[str]) -> dict[str, str]:
        """Of *cluster_ids*, those that ended over ENDED_GRACE_S ago: {id: state}."""
        if not cluster_ids:
            return {}
        ids = sorted(cluster_ids)
        rows = self._query(
            f"SELECT id, state FROM clusters WHERE id IN ({', '.join('?' * len(ids))})"
            " AND state IN ('stopped', 'failed', 'orphaned')"
            " AND COALESCE(stopped, started) < ?",
            (*ids, time.time() - ENDED_GRACE_S),
        )
        return {r["id"]: r["state"] for r in rows}

    # clusters ---------------------------------------------------------------
    def clusters(self) -> list[dict[str, Any]]:
        out = self._mark_clusters(self._query("SELECT * FROM clusters ORDER BY started DESC"))
        for c in out:
            c["ranks"] = self.ranks(c["id"])
        return out

    def cluster(self, cluster_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT * FROM clusters WHERE id = ?", (cluster_id,))
        if not rows:
            return None
        self._mark_clusters(rows)
        rows[0]["ranks"] = self.ranks(cluster_id)
        return rows[0]

    def ranks(self, cluster_id: str) -> list[dict[str, Any]]:
        """The cluster's ranks in rank order; ``node_rank`` is None where the store (of
        schema version 2, not yet opened by a newer kernel) or the rank has none."""
        if self._node_column is None:
            self._node_column = "node_rank" in columns(self._conn, "ranks")
        node = "node_rank" if self._node_column else "NULL AS node_rank"
        return self._query(
            f"SELECT rank, host, pid, device, state, engine_id, {node} FROM ranks"
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
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        rows = self._mark_runs(self._query(sql + " ORDER BY started DESC", tuple(params)))
        # Filtered after marking: a run of a dead kernel is orphaned, not running.
        return rows if state is None else [r for r in rows if r["state"] == state]

    def run(self, run_id: str) -> dict[str, Any] | None:
        rows = self._mark_runs(self._query("SELECT * FROM runs WHERE id = ?", (run_id,)))
        if not rows:
            return None
        rows[0]["ranks"] = self._query(
            "SELECT rank, state, error FROM run_ranks WHERE run_id = ? ORDER BY rank", (run_id,)
        )
        # What the magic recorded beside the run: its flags, each rank's last output lines.
        notes = self._query(
            "SELECT kind, rank, message FROM events WHERE run_id = ? AND kind IN"
            " ('command', 'output') ORDER BY seq",
            (run_id,),
        )
        rows[0]["flags"] = next((n["message"] for n in notes if n["kind"] == "command"), None)
        rows[0]["output"] = {str(n["rank"]): n["message"] for n in notes if n["kind"] == "output"}
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

    def _record_rows(
        self,
        run_id: str,
        since: int = 0,
        limit: int | None = None,
        rank: int | None = None,
        last: int | None = None,
        seqs: str | None = None,
    ) -> list[tuple[int, Record]]:
        """(seq, Record) after sequence number *since*, in order (one rank's, if given);
        with *last*, only the newest *last* of them, newest first; with *seqs* (a JSON
        list), only those."""
        if self._sys_columns is None:
            have = metrics_columns(self._conn)
            self._sys_columns = {"step_time", "comm_time", "samples", "gpu"} <= have
            self._measure_columns = set(V4_COLUMNS) <= have
        sys_cols = (
            "step_time, comm_time, samples, gpu" if self._sys_columns else "NULL, NULL, NULL, NULL"
        )
        # A store of version 3 or older (read without migrating it) has no step measures.
        sys_cols += ", " + ", ".join(V4_COLUMNS if self._measure_columns else ["NULL"] * 6)
        sql = (
            f"SELECT seq, rank, step, time, data, {sys_cols} FROM metrics"
            " WHERE run_id = ? AND seq > ?"
        )
        params: tuple[Any, ...] = (run_id, since)
        if seqs is not None:
            sql += " AND seq IN (SELECT value FROM json_each(?))"
            params += (seqs,)
        if rank is not None:
            sql += " AND rank = ?"
            params += (rank,)
        sql += " ORDER BY seq DESC LIMIT ?" if last is not None else " ORDER BY seq"
        if last is not None:
            params += (last,)
        elif limit is not None:
            sql += " LIMIT ?"
            params += (limit,)
        try:
            rows = self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"cannot read the run store at {self.path} ({e})") from e
        return [(row[0], _record(row, v1=not self._sys_columns)) for row in rows]

    def metrics(
        self, run_id: str, since: int = 0, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Records after sequence number *since*, in order, as the REST API carries them
        (``Record.to_json``: valid JSON, the user's metrics apart under "metrics")."""
        return [rec.to_json(seq) for seq, rec in self._record_rows(run_id, since, limit)]

    def records(self, run_id: str) -> list[Record]:
        return [rec for _, rec in self._record_rows(run_id)]

    def summary(self, run_id: str) -> RunSummary | None:
        """The run's derived measures (dist_notebook.protocol), from the store.

        Each rank's count, first and last step and last loss come from the facts the
        writer keeps beside the records (``metrics_ranks``), its last WINDOW records by
        the sequence numbers kept there: a few small reads per rank, whatever the run's
        length (a 64-rank run of 10^6 records: tens of ms). A run written without them
        (an older version's) reads them by the rank index of its store, or is counted and
        scanned.
        """
        run = self.run(run_id)
        if run is None:
            return None
        hosts = self._hosts(run["cluster_id"])
        facts = self._facts(run_id)
        out = []
        for rank in (r["rank"] for r in run["ranks"]):
            fact = facts.get(rank)
            seqs = fact[4] if fact else None
            recent = self._recent_by_seq(run_id, rank, seqs) if seqs else self._recent(run_id, rank)
            if fact is None and recent:  # records without facts: count them
                fact = self._count(run_id, rank)
            records, first_step, last_step, last_loss = (fact or (0, None, None, None))[:4]
            out.append(
                protocol.summarize_rank(
                    rank,
                    recent,
                    records=records,
                    first_step=first_step,
                    last_step=last_step,
                    last_loss=last_loss,
                    host=hosts.get(rank),
                )
            )
        return protocol.summarize_run(run_id, run["state"], run["steps"], out)

    def _facts(self, run_id: str) -> dict[int, tuple[Any, ...]]:
        """Each rank's (records, first_step, last_step, last_loss, recent)."""
        try:
            if self._recent_column is None:
                self._recent_column = "recent" in columns(self._conn, "metrics_ranks")
            recent = "recent" if self._recent_column else "NULL"
            rows = self._conn.execute(
                "SELECT rank, records, first_step, last_step, last_loss,"
                f" {recent} FROM metrics_ranks WHERE run_id = ?",
                (run_id,),
            ).fetchall()
        except sqlite3.OperationalError:  # a store no writer of this version has opened
            return {}
        return {row[0]: tuple(row)[1:] for row in rows}

    def _recent_by_seq(self, run_id: str, rank: int, seqs: str) -> list[Record]:
        """The rank's records of sequence numbers *seqs* (a JSON list), oldest first."""
        return [rec for _, rec in self._record_rows(run_id, rank=rank, seqs=seqs)]

    def _count(self, run_id: str, rank: int) -> tuple[Any, ...]:
        facts = self._query(
            "SELECT COUNT(*) AS n FROM metrics WHERE run_id = ? AND rank = ?", (run_id, rank)
        )[0]
        first = self._query(
            "SELECT step FROM metrics WHERE run_id = ? AND rank = ? AND step IS NOT NULL"
            " ORDER BY seq LIMIT 1",
            (run_id, rank),
        )
        last = self._query(
            "SELECT step FROM metrics WHERE run_id = ? AND rank = ? AND step IS NOT NULL"
            " ORDER BY seq DESC LIMIT 1",
            (run_id, rank),
        )
        return (
            facts["n"],
            first[0]["step"] if first else None,
            last[0]["step"] if last else None,
            self._last_loss(run_id, rank),
        )

    def _recent(self, run_id: str, rank: int) -> list[Record]:
        """The rank's last WINDOW records, oldest first."""
        return [
            rec for _, rec in reversed(self._record_rows(run_id, rank=rank, last=protocol.WINDOW))
        ]

    def _last_loss(self, run_id: str, rank: int) -> float | None:
        # The newest finite loss: scan back in pages (usually the first page has it).
        before = None
        while True:
            sql = "SELECT seq, data FROM metrics WHERE run_id = ? AND rank = ?"
            params: tuple[Any, ...] = (run_id, rank)
            if before is not None:
                sql += " AND seq < ?"
                params += (before,)
            rows = self._query(sql + " ORDER BY seq DESC LIMIT 200", params)
            if not rows:
                return None
            loss = protocol.last_finite([_metrics(r["data"]) for r in reversed(rows)], "loss")
            if loss is not None:
                return loss
            before = rows[-1]["seq"]

    def _hosts(self, cluster_id: str) -> dict[int, str]:
        return {
            r["rank"]: r["host"]
            for r in self._query("SELECT rank, host FROM ranks WHERE cluster_id = ?", (cluster_id,))
        }

    def events_since(self, run_id: str, kind: str, since: int = 0) -> list[dict[str, Any]]:
        """A run's events of *kind* after sequence number *since*, in order."""
        return self._query(
            "SELECT * FROM events WHERE run_id = ? AND kind = ? AND seq > ? ORDER BY seq",
            (run_id, kind, since),
        )

    def record_rows(self, run_id: str, since: int = 0) -> list[tuple[int, Record]]:
        """(seq, Record) of a run after sequence number *since*: to follow a run."""
        return self._record_rows(run_id, since)

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


def _metrics(data: str) -> dict[str, float]:
    out = {}
    for k, v in json.loads(data).items():
        value = protocol.from_json_value(v)
        if value is not None:
            out[k] = value
    return out


def _record(row: sqlite3.Row | tuple[Any, ...], v1: bool) -> Record:
    _, rank, step, time_, data, step_time, comm_time, samples, gpu, *measures = tuple(row)
    metrics = _metrics(data)
    if v1:  # a store of version 1, read without migrating it (it may be read-only)
        step_time, comm_time, samples = (metrics.pop(k, None) for k in _V1_SYSTEM)
    return Record(
        rank=rank,
        step=step,
        time=time_,
        step_time=step_time,
        comm_time=comm_time,
        samples=samples,
        metrics=metrics,
        gpu=_metrics(gpu) if gpu else None,
        cpu_time=measures[0],
        run_delay=measures[1],
        load=measures[2],
        cores=measures[3],
        data_time=measures[4],
        peak_mem=measures[5],
    )
