"""A run's metric records, per rank, in memory, with the measures every view shows.

Every record is kept (full history per rank). The derived measures are
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

Listener = Callable[[list[Record]], None]


class _RankLog:
    __slots__ = ("records", "first_step", "last_step", "last_loss")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.first_step: int | None = None
        self.last_step: int | None = None
        self.last_loss: float | None = None

    def add(self, rec: Record) -> None:
        self.records.append(rec)
        if rec.step is not None:
            if self.first_step is None:
                self.first_step = rec.step
            self.last_step = rec.step
        loss = rec.metrics.get("loss")
        if loss is not None and math.isfinite(loss):
            self.last_loss = loss


class RunMetrics:
    """Thread-safe: the collector thread adds, the display thread reads.

    Listeners get each new batch of records (on the collector's thread: keep them quick).
    """

    def __init__(self, ranks: list[int], hosts: dict[int, str] | None = None) -> None:
        self.ranks = list(ranks)
        self.hosts = dict(hosts or {})
        self._logs: dict[int, _RankLog] = {r: _RankLog() for r in ranks}
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self.count = 0

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def add(self, records: list[Record]) -> None:
        with self._lock:
            logs = self._logs
            for rec in records:  # _RankLog.add, inline: this runs for every record
                log = logs.get(rec.rank)
                if log is None:
                    log = logs[rec.rank] = _RankLog()
                log.records.append(rec)
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
        with self._lock:
            log = self._logs.get(rank)
            return list(log.records) if log else []

    def all_records(self) -> list[Record]:
        """Every record of every rank, rank by rank."""
        with self._lock:
            return [rec for r in sorted(self._logs) for rec in self._logs[r].records]

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
                len(log.records),
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
