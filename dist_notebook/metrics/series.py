"""A run's metric records, per rank, in memory, with the measures every view shows.

Every record is kept as it came up to a bound for the run (``KEPT_RECORDS`` for all its
ranks together, at least ``MIN_KEPT_PER_RANK`` a rank); beyond it, a rank's oldest
records are folded into min/max envelopes (``thinning.ThinnedLog``: spikes and gaps
kept, at most a few thousand points), which is what the pictures draw. The run store
has every record (``load_run(...).records()``). A record costs the kernel ~350 B: the
bound keeps a 64-rank run of 10^6 records at about a quarter of what keeping them all
took, and a short run (every record kept) costs nothing more. The derived measures are
``dist_notebook.protocol``'s (computed there, once, for the cell, the panel and
``load_run``); this module only keeps the records and the few running facts those
measures need, so a summary costs O(WINDOW), not O(records).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from .. import protocol
from ..protocol import RankSummary, Record, RunSummary
from .thinning import ThinnedLog

Listener = Callable[[list[Record]], None]
KEPT_RECORDS = 1 << 17  # records kept as they came, all ranks together
MIN_KEPT_PER_RANK = 2048
OLDER_POINTS = 1 << 17  # points of the folded older history, all ranks together
OLDER_POINTS_PER_RANK = (1000, 8000)  # ... within these bounds a rank


class _RankLog:
    __slots__ = ("records", "older", "first_step", "last_step", "last_loss")

    def __init__(self) -> None:
        self.records: list[Record] = []  # the latest, as they came
        self.older: ThinnedLog | None = None  # the ones before, folded
        self.first_step: int | None = None
        self.last_step: int | None = None
        self.last_loss: float | None = None

    @property
    def count(self) -> int:
        return len(self.records) + (self.older.count if self.older else 0)

    def history(self) -> list[Record]:
        older = self.older.points() if self.older else []
        return older + self.records

    def fold(self, points: int) -> None:
        """Fold the older half of the kept records into the envelopes."""
        half = len(self.records) // 2
        if self.older is None:
            self.older = ThinnedLog(points)
        self.older.extend(self.records[:half])
        del self.records[:half]


class RunMetrics:
    """Thread-safe: the collector thread adds, the display thread reads.

    Listeners get each new batch of records (on the collector's thread: keep them quick).
    """

    def __init__(self, ranks: list[int], hosts: dict[int, str] | None = None) -> None:
        self.ranks = list(ranks)
        self.hosts = dict(hosts or {})
        self._logs: dict[int, _RankLog] = {r: _RankLog() for r in ranks}
        per_rank = max(1, len(ranks))
        self._keep = max(MIN_KEPT_PER_RANK, KEPT_RECORDS // per_rank)
        low, high = OLDER_POINTS_PER_RANK
        self._points = max(low, min(high, OLDER_POINTS // per_rank))
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self.count = 0

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def add(self, records: list[Record]) -> None:
        with self._lock:
            logs = self._logs
            for rec in records:  # inline: this runs for every record
                log = logs.get(rec.rank)
                if log is None:
                    log = logs[rec.rank] = _RankLog()
                log.records.append(rec)
                if len(log.records) > self._keep:
                    log.fold(self._points)
                step = rec.step
                if step is not None:
                    if log.first_step is None:
                        log.first_step = step
                    log.last_step = step
                loss = rec.metrics.get("loss")
                if loss is not None and -math.inf < loss < math.inf:
                    log.last_loss = loss
            self.count += len(records)
        for listener in self._listeners:
            listener(records)

    def records(self, rank: int) -> list[Record]:
        """The rank's history, oldest first: every record of a short run; in a long one
        the oldest folded into envelopes (each metric's lowest and highest of a stretch)."""
        with self._lock:
            log = self._logs.get(rank)
            return log.history() if log else []

    def series(self, rank: int, key: str) -> tuple[list[float], list[float]]:
        """(steps, values) of one user metric for one rank; non-finite values are kept."""
        xs, ys = [], []
        for i, rec in enumerate(self.records(rank)):
            value = rec.metrics.get(key)
            if value is not None:
                xs.append(float(rec.step if rec.step is not None else i))
                ys.append(value)
        return xs, ys

    def mean_series(self, key: str) -> tuple[list[float], list[float]]:
        """The metric averaged over the ranks at each step every rank has reported."""
        per_rank = [dict(zip(*self.series(r, key), strict=True)) for r in self.ranks]
        if not per_rank:
            return [], []
        common = sorted(set.intersection(*(set(d) for d in per_rank)))
        return common, [math.fsum(d[s] for d in per_rank) / len(per_rank) for s in common]

    def summary(self, rank: int) -> RankSummary:
        with self._lock:
            log = self._logs.get(rank) or _RankLog()
            recent = log.records[-protocol.WINDOW :]
            count, first, last, loss = (
                log.count,
                log.first_step,
                log.last_step,
                log.last_loss,
            )
        return protocol.summarize_rank(
            rank,
            recent,
            records=count,
            first_step=first,
            last_step=last,
            last_loss=loss,
            host=self.hosts.get(rank),
        )

    def summaries(self) -> list[RankSummary]:
        return protocol.mark_stragglers([self.summary(r) for r in self.ranks])

    def run_summary(self, run_id: str, state: str, steps: int | None) -> RunSummary:
        return protocol.summarize_run(run_id, state, steps, [self.summary(r) for r in self.ranks])
