"""A rank's records as a bounded number of points: min/max envelopes that keep spikes
(the live view's batches and a late view's history, ``display/live.py``).

``thin`` turns a list of records into envelopes at a given stride (used for each batch
the live view sends). ``ThinnedLog`` keeps one rank's whole history in that form as the
records come, each record folded in once: a late view's history (a reloaded page) is
then sent from at most ``max_points`` points a rank, whatever the run's length (a history
thinned from every record cost the kernel ~1.7 s of CPU per 10^6 records).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from ..protocol import Record

MAX_POINTS = 4000  # records per rank sent as they are; beyond, min/max envelopes


def stride_for(count: int, max_points: int = MAX_POINTS) -> int:
    """Records per bucket once a rank has *count*: 1 up to max_points, then powers of 2."""
    stride = 1
    while count > max_points * stride:
        stride *= 2
    return stride


def envelope(chunk: Sequence[Record]) -> list[Record]:
    """Two records standing for *chunk*: each metric's lowest, then its highest value.

    A non-finite value in the chunk is kept as the low one, so the gap still shows. The
    envelope of envelopes is the envelope of their records."""
    if len(chunk) <= 2:
        return list(chunk)
    low: dict[str, float] = {}
    high: dict[str, float] = {}
    for rec in chunk:
        for name, value in rec.metrics.items():
            if not math.isfinite(value):
                low[name] = value
                continue
            if name not in low or (math.isfinite(low[name]) and value < low[name]):
                low[name] = value
            if name not in high or value > high[name]:
                high[name] = value
    first, last = chunk[0], chunk[-1]
    return [
        dataclasses.replace(first, metrics=low),
        dataclasses.replace(last, metrics={**low, **high}),
    ]


def thin(records: Sequence[Record], stride: int) -> list[Record]:
    """*records* (one rank's, in order) as they are (stride 1) or as envelopes."""
    if stride <= 1:
        return list(records)
    out: list[Record] = []
    for i in range(0, len(records), stride):
        out.extend(envelope(records[i : i + stride]))
    return out


def _fold(low: dict[str, float], high: dict[str, float], metrics: dict[str, float]) -> None:
    """Fold one record's (or one envelope's) metrics into a bucket's lows and highs, as
    ``envelope`` does: a non-finite value is kept as the low one."""
    for name, value in metrics.items():
        if not math.isfinite(value):
            low[name] = value
            continue
        old = low.get(name)
        if old is None or (math.isfinite(old) and value < old):
            low[name] = value
        if name not in high or value > high[name]:
            high[name] = value


_STRETCH = 48  # records from which a stretch is folded a metric at a time


def _fold_stretch(low: dict[str, float], high: dict[str, float], chunk: list[Record]) -> None:
    """``_fold`` of every record of *chunk* in order, a metric at a time."""
    inf = math.inf
    names: set[str] = set().union(*[rec.metrics.keys() for rec in chunk])
    for name in names:
        values = [v for rec in chunk if (v := rec.metrics.get(name)) is not None]
        finite = [v for v in values if -inf < v < inf]
        if len(finite) < len(values):  # the stretch's last NaN or infinity is the low one
            low[name] = next(v for v in reversed(values) if not -inf < v < inf)
        elif finite:
            old = low.get(name)
            least = min(finite)
            if old is None or (-inf < old < inf and least < old):
                low[name] = least
        if finite:
            top = high.get(name)
            most = max(finite)
            if top is None or most > top:
                high[name] = most


class _Bucket:
    """``count`` records: the first and last, and each metric's lowest and highest."""

    __slots__ = ("first", "last", "low", "high", "count")

    def __init__(self, rec: Record) -> None:
        self.first = self.last = rec
        self.low: dict[str, float] = {}
        self.high: dict[str, float] = {}
        self.count = 0

    def add(self, rec: Record) -> None:
        self.last = rec
        self.count += 1
        _fold(self.low, self.high, rec.metrics)

    def merge(self, later: _Bucket) -> _Bucket:
        self.last = later.last
        self.count += later.count
        _fold(self.low, self.high, later.low)
        _fold(self.low, self.high, later.high)
        return self

    def points(self) -> list[Record]:
        if self.count <= 2:  # the records themselves
            return [self.first] if self.count == 1 else [self.first, self.last]
        return [
            dataclasses.replace(self.first, metrics=dict(self.low)),
            dataclasses.replace(self.last, metrics={**self.low, **self.high}),
        ]


class ThinnedLog:
    """One rank's history in at most ``max_points`` points (plus the open bucket's two).

    Buckets of ``stride`` records each keep their first and last record and each metric's
    range; when they would need more than ``max_points`` points, neighbours merge and the
    stride doubles. Records are made only when the points are read. Not thread-safe: one
    owner adds and reads.
    """

    __slots__ = ("max_points", "stride", "count", "_done", "_open")

    def __init__(self, max_points: int) -> None:
        self.max_points = max(4, max_points)
        self.stride = 1
        self.count = 0
        self._done: list[_Bucket] = []
        self._open: _Bucket | None = None

    def add(self, rec: Record) -> None:
        self.count += 1
        bucket = self._open
        if bucket is None:
            bucket = self._open = _Bucket(rec)
        bucket.add(rec)
        if bucket.count >= self.stride:
            self._done.append(bucket)
            self._open = None
            if 2 * len(self._done) > self.max_points:
                self._halve()

    def extend(self, records: list[Record]) -> None:
        """``add`` for each of *records*, a bucket's worth at a time: each metric's range
        over the stretch by the built-in min and max (what a long run's metrics pay for
        every record past their bound: about a third less than ``add`` record by record)."""
        i, n = 0, len(records)
        while i < n:
            bucket = self._open
            if bucket is None:
                bucket = self._open = _Bucket(records[i])
            take = min(self.stride - bucket.count, n - i)
            chunk = records[i : i + take]
            if take >= _STRETCH:
                _fold_stretch(bucket.low, bucket.high, chunk)
            else:  # a short stretch: record by record costs less than the set-up
                for rec in chunk:
                    _fold(bucket.low, bucket.high, rec.metrics)
            i += take
            bucket.last = chunk[-1]
            bucket.count += take
            self.count += take
            if bucket.count >= self.stride:
                self._done.append(bucket)
                self._open = None
                if 2 * len(self._done) > self.max_points:
                    self._halve()

    def _halve(self) -> None:
        done = self._done
        self.stride *= 2
        self._done = [done[i].merge(done[i + 1]) for i in range(0, len(done) - 1, 2)]
        if len(done) % 2:  # the last bucket is half of the next one, still open
            self._open = done[-1]

    def points(self) -> list[Record]:
        """The history, oldest first, as points."""
        out = [rec for bucket in self._done for rec in bucket.points()]
        if self._open is not None:
            out.extend(self._open.points())
        return out
