"""Deletes of runs and clusters in small transactions, so a delete never holds the store.

One transaction of a delete holds SQLite's write lock for about ``CHUNK_S`` (its row
budget follows the time the last one took), then lets go for ``GAP_S``. A writer that
began to wait during the transaction has waited at most ``CHUNK_S``, and SQLite's busy
handler then tries again every 25 ms (its sleeps grow 1, 2, 5, ... 25 ms, 50 ms after
0.1 s, 100 ms after 0.3 s): it gets the lock in the gap, within one transaction's time,
not after the whole delete (a prune of 8 M records held the store for 6.4 s in one
transaction, and the run that ended meanwhile lost its last records and its final state).
The price: a delete takes about three times as long as one transaction would.

A run's records go first, its row last: a delete cut short leaves the run, with fewer
records, and deleting it again finishes the job.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")
# Runs *work* in one write transaction of the store and returns its result.
Transaction = Callable[[Callable[[sqlite3.Connection], T]], T]

CHUNK_S = 0.05
GAP_S = 0.05
FIRST_ROWS = 2000
MIN_ROWS, MAX_ROWS = 100, 200_000
CLUSTERS_PER_CHUNK = 200


class Pacer:
    """The row budget of the next transaction and the pause after it: at least as long
    as the transaction took (on a loaded machine one takes longer than CHUNK_S, and a
    writer that waited through it retries less often)."""

    def __init__(self) -> None:
        self.rows = FIRST_ROWS
        self.last = 0.0

    def took(self, seconds: float, rows: int) -> None:
        self.last = seconds
        if rows >= self.rows:  # a full chunk: scale the budget to the time it took
            scaled = int(self.rows * CHUNK_S / max(seconds, 1e-4))
            self.rows = max(MIN_ROWS, min(MAX_ROWS, scaled, self.rows * 4))
        elif seconds > 2 * CHUNK_S:
            self.rows = max(MIN_ROWS, self.rows // 2)

    def pause(self) -> None:
        time.sleep(max(GAP_S, self.last))


def delete_runs(transaction: Transaction[Any], run_ids: Sequence[str]) -> int:
    """Delete *run_ids* with their ranks, records and events; how many runs were found."""
    todo = list(dict.fromkeys(run_ids))
    pacer = Pacer()
    found = 0
    while todo:
        budget = pacer.rows
        t0 = time.monotonic()
        done, rows, gone = transaction(partial(_runs_chunk, todo=todo, budget=budget))
        pacer.took(time.monotonic() - t0, rows)
        found += gone
        del todo[:done]
        if todo:
            pacer.pause()
    return found


def _runs_chunk(conn: sqlite3.Connection, *, todo: list[str], budget: int) -> tuple[int, int, int]:
    """Delete up to *budget* rows of the runs *todo*, oldest first: (runs finished, rows
    deleted, runs rows deleted)."""
    rows, finished = 0, 0
    for run_id in todo:
        left = budget - rows
        if left <= 0:
            break
        # The run's first *left* records, as one range of its index (twice as fast as
        # a list of their seq); all that are left when they are fewer.
        cur = conn.execute(
            "DELETE FROM metrics WHERE run_id = ? AND seq <= COALESCE((SELECT seq FROM metrics"
            " WHERE run_id = ? ORDER BY seq LIMIT 1 OFFSET ?), 9223372036854775807)",
            (run_id, run_id, left - 1),
        )
        rows += cur.rowcount
        if cur.rowcount == left:
            break  # records of this run may be left: the next transaction goes on
        finished += 1
    ended = todo[:finished]
    gone = 0
    if ended:
        marks = ", ".join("?" * len(ended))
        for table in ("run_ranks", "events"):
            rows += conn.execute(f"DELETE FROM {table} WHERE run_id IN ({marks})", ended).rowcount
        gone = conn.execute(f"DELETE FROM runs WHERE id IN ({marks})", ended).rowcount
        rows += gone
    return finished, rows, gone


def delete_clusters(transaction: Transaction[Any], cluster_ids: Sequence[str]) -> int:
    """Delete *cluster_ids* with their ranks and events, a few hundred per transaction."""
    ids = list(dict.fromkeys(cluster_ids))
    pacer = Pacer()
    for i in range(0, len(ids), CLUSTERS_PER_CHUNK):
        part = ids[i : i + CLUSTERS_PER_CHUNK]
        marks = ", ".join("?" * len(part))

        def work(conn: sqlite3.Connection, part: list[str] = part, marks: str = marks) -> None:
            for table, key in (
                ("ranks", "cluster_id"),
                ("events", "cluster_id"),
                ("clusters", "id"),
            ):
                conn.execute(f"DELETE FROM {table} WHERE {key} IN ({marks})", part)

        t0 = time.monotonic()
        transaction(work)
        pacer.took(time.monotonic() - t0, 0)
        if i + CLUSTERS_PER_CHUNK < len(ids):
            pacer.pause()
    return len(ids)
