"""Writes to the run store; used by the kernel (and briefly by the server and magics).

Writes are never dropped because another program holds the store: they wait, in order,
and are written once it is free (``queued.py``). Deletes (``delete_runs``, ``prune``) go
in small transactions (``deleting.py``), so they never hold the store for more than a
fraction of a second.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain, groupby
from operator import attrgetter, itemgetter
from typing import Any

from ..protocol import (
    WINDOW,
    ClusterState,
    EngineState,
    Record,
    RunRankState,
    RunState,
    is_final,
    json_value,
    predecessors,
)
from . import deleting
from .backlog import Statements
from .queued import QueuedWriter, Rows, StoreError

# Cluster states with processes that a kernel still owns.
LIVE_CLUSTER = ("new", "starting", "ready", "degraded", "restarting", "stopping")
# A run left unfinished this long after its cluster ended is orphaned (reader.py reads it so).
ENDED_GRACE_S = 30.0
_INSERT_RECORD = (
    "INSERT INTO metrics (run_id, rank, step, time, data, step_time, comm_time, samples, gpu,"
    " cpu_time, run_delay, load, cores, data_time, peak_mem)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# Records go in statements of this many rows each (the rest one by one): SQLite's cost of
# a statement (the AUTOINCREMENT bookkeeping, a step) is shared by its rows, ~25% less a
# record than one row per statement. 50 x 15 parameters are far below SQLite's limit.
ROWS_PER_INSERT = 50
_FIELDS = 15
_INSERT_RECORDS = _INSERT_RECORD + (", (" + ", ".join("?" * _FIELDS) + ")") * (ROWS_PER_INSERT - 1)
_UPSERT_FACTS = (
    "INSERT INTO metrics_ranks (run_id, rank, records, first_step, last_step, last_loss, recent)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, rank) DO UPDATE SET"
    " records = records + excluded.records,"
    " first_step = COALESCE(first_step, excluded.first_step),"
    " last_step = COALESCE(excluded.last_step, last_step),"
    " last_loss = COALESCE(excluded.last_loss, last_loss),"
    " recent = excluded.recent"
)
_RECENT = "SELECT rank, recent FROM metrics_ranks WHERE run_id = ?"

_RANK = attrgetter("rank")
_ROW_RANK = itemgetter(1)


def _json(values: Mapping[str, float]) -> str:
    """*values* (a flat object of numbers) as valid JSON. The C encoder refuses
    non-finite values at once, so only the rare record with a NaN or an infinity pays for
    the conversion."""
    if _encode is not None:
        try:
            return "".join(_encode(values, 0))
        except ValueError:
            pass
    return json.dumps({k: json_value(v) for k, v in values.items()})


# json.dumps builds its C encoder anew on every call (half its cost for a record's few
# metrics); this one is built once. No cycle check: a record's values are flat numbers.
def _make_encoder() -> Any:
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: json.dumps in _json
        return None
    try:
        esc = json.encoder.encode_basestring_ascii
        return make(None, None, esc, None, ": ", ", ", False, False, False)
    except TypeError:  # another Python's signature: json.dumps in _json
        return None


_encode = _make_encoder()


def orphan_reason(kernel_pid: int | None) -> str:
    return f"its kernel (pid {kernel_pid}) exited before the run ended"


def _guarded_cluster(
    cluster_id: str,
    state: ClusterState,
    backend: str | None,
    now: float | None,
    n: int | None = None,
) -> tuple[str, Sequence[Any]]:
    allowed = predecessors(state, ClusterState)
    ended = state in (ClusterState.STOPPED, ClusterState.FAILED, ClusterState.ORPHANED)
    stopped = now if ended else None
    return (
        "UPDATE clusters SET state = ?, backend = COALESCE(?, backend), n = COALESCE(?, n),"
        " stopped = CASE WHEN ? IS NULL THEN NULL ELSE COALESCE(stopped, ?) END WHERE id = ?"
        f" AND state IN ({', '.join('?' * len(allowed))})",
        (state.value, backend, n, stopped, stopped, cluster_id, *allowed),
    )


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


class MetricRows:
    """A run's records not yet stored, as the store's rows and each rank's facts (count,
    first and last step, last finite loss): what the collector keeps between flushes in
    place of the records, which it drops once the live view and the sinks have them. Made
    as the records come (a message at a time), written by ``StoreWriter.append_rows``."""

    __slots__ = ("run_id", "rows", "facts", "size")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.rows: list[tuple[Any, ...]] = []
        self.facts: dict[int, list[Any]] = {}
        self.size = 0  # bytes, about, as the backlog counts them

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, records: list[Record], texts: Sequence[str | None] | None = None) -> None:
        """Add *records* (in the order they came; *texts* as in ``append_metrics``)."""
        if not records:
            return
        run_id = self.run_id
        if texts is None:
            datas = list(map(_json, [r.metrics for r in records]))
        else:
            pairs = zip(records, texts, strict=True)
            datas = [_json(r.metrics) if t is None else t for r, t in pairs]
        self.rows.extend(
            (
                run_id,
                r.rank,
                r.step,
                r.time,
                d,
                r.step_time,
                r.comm_time,
                r.samples,
                None if r.gpu is None else _json(r.gpu),
                r.cpu_time,
                r.run_delay,
                r.load,
                r.cores,
                r.data_time,
                r.peak_mem,
            )
            for r, d in zip(records, datas, strict=True)
        )
        self.size += 96 * len(records) + sum(map(len, datas))
        facts = self.facts
        first = records[0].rank
        # A rank's batch (what a message holds) is one group; mixed ranks are grouped.
        groups: Iterable[tuple[int, Any]] = (
            ((first, records),)
            if all(r.rank == first for r in records)
            else groupby(sorted(records, key=_RANK), _RANK)
        )
        for rank, run in groups:
            group = run if type(run) is list else list(run)
            fact = facts.get(rank)
            if fact is None:
                fact = facts[rank] = [run_id, rank, 0, None, None, None]
            fact[2] += len(group)
            steps = [r.step for r in group if r.step is not None]
            if steps:
                if fact[3] is None:
                    fact[3] = steps[0]
                fact[4] = steps[-1]
            for r in reversed(group):
                loss = r.metrics.get("loss")
                if loss is not None and -math.inf < loss < math.inf:
                    fact[5] = loss
                    break


class StoreWriter(QueuedWriter):
    """A thread-safe writer: the collector thread and the kernel's thread share it."""

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
        """The cluster's row, made at its first start. A later life of the cluster (a
        start after a failure or a stop) keeps the row's first start time and its state
        (moved along the protocol by ``set_cluster_state``), and takes the new life's
        processes: the first life's record is never replaced by a fresh 'starting' row."""
        self._write(
            "INSERT INTO clusters (id, state, backend, n, started, kernel_pid,"
            " profile_dir, ipp_cluster_id) VALUES (?, 'starting', ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET backend = excluded.backend, n = excluded.n,"
            " kernel_pid = excluded.kernel_pid, profile_dir = excluded.profile_dir,"
            " ipp_cluster_id = excluded.ipp_cluster_id",
            (cluster_id, backend, n, time.time(), kernel_pid, profile_dir, ipp_cluster_id),
        )

    def set_cluster_state(
        self, cluster_id: str, state: str, backend: str | None = None, n: int | None = None
    ) -> None:
        """Move the cluster to *state* (and its rank count to *n*, if given) along the
        protocol's transitions only: a state written by another process (the server's
        ``orphaned``, a ``stopped``) is never overwritten by this one's stale view."""
        self._many([_guarded_cluster(cluster_id, ClusterState(state), backend, time.time(), n)])

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

    def append_metrics(
        self, run_id: str, records: Iterable[Record], texts: Sequence[str | None] | None = None
    ) -> None:
        """Append records in one transaction; user metrics as JSON (valid JSON: non-finite
        values as "nan"/"inf"/"-inf"), the system's fields in their own columns. Each
        rank's facts (count, first and last step, last finite loss) are updated in the
        same transaction, so they always agree with the records stored. *texts*, when
        given, holds each record's metrics as that JSON already (``columns.read`` makes
        them a column at a time), None where it does not."""
        rows = MetricRows(run_id)
        rows.add(records if type(records) is list else list(records), texts)
        self.append_rows(rows)

    def append_rows(self, rows: MetricRows) -> None:
        """``append_metrics`` of the records *rows* was made from."""
        if not rows.rows:
            return
        # Inserted rank by rank (a stable sort: each rank's records keep their order, and
        # their seq): a rank's records of a flush are then one block of consecutive seqs,
        # the end of which is its facts' recent seqs (and a store of an older version's
        # rank index grows at one place per rank and flush, not at every message's).
        ordered = sorted(rows.rows, key=_ROW_RANK)
        full = len(ordered) - len(ordered) % ROWS_PER_INSERT
        flat = list(chain.from_iterable(ordered[:full]))
        step = ROWS_PER_INSERT * _FIELDS
        inserts: Statements = [
            (_INSERT_RECORDS, Rows(tuple(flat[i : i + step]) for i in range(0, len(flat), step))),
            (_INSERT_RECORD, Rows(ordered[full:])),
        ]
        ends: dict[int, int] = {}  # each rank's rows end here in *ordered* (a block each)
        for i, row in enumerate(ordered):
            ends[row[1]] = i + 1
        run_id, facts, n = rows.run_id, rows.facts, len(ordered)

        def job(conn: sqlite3.Connection) -> Iterator[tuple[str, Sequence[Any]]]:
            yield from inserts
            # The rows just inserted took consecutive seqs (AUTOINCREMENT, one
            # transaction), in *ordered*'s order, ending at the last one inserted.
            first = conn.execute("SELECT last_insert_rowid()").fetchone()[0] - n + 1
            before: dict[int, list[int]] | None = None
            upserts = []
            start = 0
            for rank, end in ends.items():
                seqs = list(range(first + max(start, end - WINDOW), first + end))
                if len(seqs) < WINDOW:  # the rest of its last WINDOW from earlier flushes
                    if before is None:
                        before = {
                            r: json.loads(t) for r, t in conn.execute(_RECENT, (run_id,)) if t
                        }
                    seqs = before.get(rank, [])[len(seqs) - WINDOW :] + seqs
                upserts.append((*facts[rank], json.dumps(seqs, separators=(",", ":"))))
                start = end
            yield (_UPSERT_FACTS, Rows(upserts))

        self._submit(job, records=n, size=rows.size, run_id=run_id)

    # deleting ---------------------------------------------------------------
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
