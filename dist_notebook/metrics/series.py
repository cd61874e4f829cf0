"""A run's metric records, per rank, with the measures the dashboard shows.

Every record is kept (full history per rank). Derived measures come from a short
window of recent records so they follow changes during a run:

- step time: median of the last ``WINDOW`` intervals between a rank's reports;
- samples/s: samples reported over the window divided by its duration;
- comm share: gradient all-reduce time (``comm_time``) over step time;
- straggler: a rank whose step time is more than 20% above the median rank's.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WINDOW = 20
STRAGGLER_FACTOR = 1.2

Listener = Callable[[], None]


@dataclass
class RankSummary:
    rank: int
    records: int
    last_step: int | None
    last_loss: float | None
    step_time: float | None
    samples_per_s: float | None
    comm_share: float | None
    last_time: float | None
    straggler: bool = False


class RunMetrics:
    """Thread-safe: the collector thread adds, the display thread reads."""

    def __init__(self, ranks: list[int]) -> None:
        self.ranks = list(ranks)
        self._records: dict[int, list[dict[str, Any]]] = {r: [] for r in ranks}
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self.count = 0

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def add(self, records: list[dict[str, Any]]) -> None:
        with self._lock:
            for rec in records:
                self._records.setdefault(rec["rank"], []).append(rec)
            self.count += len(records)
        for listener in self._listeners:
            listener()

    def records(self, rank: int) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._records.get(rank, []))

    def series(self, rank: int, key: str) -> tuple[list[float], list[float]]:
        """(steps, values) of one metric for one rank; records without it are skipped."""
        xs, ys = [], []
        for i, rec in enumerate(self.records(rank)):
            value = rec.get(key)
            if isinstance(value, int | float):
                step = rec.get("step")
                xs.append(float(step if step is not None else i))
                ys.append(float(value))
        return xs, ys

    def mean_series(self, key: str) -> tuple[list[float], list[float]]:
        """The metric averaged over the ranks at each step every rank has reported."""
        per_rank = [dict(zip(*self.series(r, key), strict=True)) for r in self.ranks]
        if not per_rank:
            return [], []
        common = sorted(set.intersection(*(set(d) for d in per_rank)))
        return common, [statistics.fmean(d[s] for d in per_rank) for s in common]

    def summary(self, rank: int) -> RankSummary:
        """The rank's latest measures; costs O(WINDOW), not O(records), so the dashboard
        can ask several times a second during a long run."""
        with self._lock:
            all_recs = self._records.get(rank, [])
            count = len(all_recs)
            recent = all_recs[-WINDOW:]
            last_loss = _last(all_recs, "loss", numeric=True)
            last_step = _last(all_recs, "step", numeric=False)
        steps = [r["step_time"] for r in recent if isinstance(r.get("step_time"), int | float)]
        step_time = statistics.median(steps) if steps else None
        samples = [r for r in recent if isinstance(r.get("samples"), int | float)]
        samples_per_s = None
        if len(samples) >= 2:
            span = samples[-1]["time"] - samples[0]["time"]
            if span > 0:
                samples_per_s = sum(r["samples"] for r in samples[1:]) / span
        comm = [
            r["comm_time"] / r["step_time"]
            for r in recent
            if isinstance(r.get("comm_time"), int | float) and r.get("step_time")
        ]
        return RankSummary(
            rank=rank,
            records=count,
            last_step=last_step,
            last_loss=last_loss,
            step_time=step_time,
            samples_per_s=samples_per_s,
            comm_share=min(1.0, statistics.fmean(comm)) if comm else None,
            last_time=recent[-1]["time"] if recent else None,
        )

    def summaries(self) -> list[RankSummary]:
        out = [self.summary(r) for r in self.ranks]
        times = [s.step_time for s in out if s.step_time]
        if len(times) >= 2:
            median = statistics.median(times)
            for s in out:
                s.straggler = bool(s.step_time and s.step_time > STRAGGLER_FACTOR * median)
        return out


def _last(records: list[dict[str, Any]], key: str, numeric: bool) -> Any:
    """The newest value of *key*, looking back from the end (usually one step)."""
    for rec in reversed(records):
        value = rec.get(key)
        if value is not None and (not numeric or isinstance(value, int | float)):
            return value
    return None
