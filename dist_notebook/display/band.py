"""The banded view of many ranks, for the static picture: the live chart's rule
(extension/src/chart/band.ts) in Python, so that the end's picture of a 64-rank run reads
like the live chart did.

Beyond BANDED_BEYOND ranks a curve per rank is a tangle: the picture draws the median
across ranks and their min-max band, plus the DEVIATING ranks that stray most from the
median (named). Ranks are matched by bucket of x, not by step, as in the browser.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..protocol import Record

BANDED_BEYOND = 8  # ranks beyond which the picture is banded (the live chart's rule)
DEVIATING = 3  # the ranks the banded picture names and draws, at most
# A rank is named only when it strays from the median more than DEVIATION_FACTOR x the
# median rank's distance, and by more than DEVIATION_FLOOR of the band's width: ranks
# spread evenly (the lowest and highest are the band's edges) name nobody.
DEVIATION_FACTOR = 3.0
DEVIATION_FLOOR = 0.1


@dataclass
class Band:
    """Per bucket: x (its centre), the ranks' min, median and max; per rank: its mean
    distance to the median in units of the band's width."""

    x: list[float] = field(default_factory=list)
    lo: list[float] = field(default_factory=list)
    mid: list[float] = field(default_factory=list)
    hi: list[float] = field(default_factory=list)
    deviation: dict[int, float] = field(default_factory=dict)


Series = Mapping[int, tuple[Sequence[float], Sequence[float]]]  # rank -> (xs, values)


def band_of(series: Series, buckets: int) -> Band:
    """The band of *series* over at most *buckets* buckets of x (about one point of a
    rank per bucket: the median rank's count of points, if fewer)."""
    xs = [x for pts, _ in series.values() for x in pts]
    lengths = [len(pts) for pts, _ in series.values() if len(pts)]
    if not xs:
        return Band()
    lo, hi = min(xs), max(xs)
    count = max(1, min(buckets, round(statistics.median(lengths))))
    width = (hi - lo) / count or 1.0
    rows: dict[int, list[float]] = {}
    for rank, (pts, values) in series.items():
        sums, ns = [0.0] * count, [0] * count
        for x, v in zip(pts, values, strict=True):
            if math.isfinite(v):
                b = min(count - 1, max(0, math.floor((x - lo) / width)))
                sums[b] += v
                ns[b] += 1
        rows[rank] = [s / n if n else math.nan for s, n in zip(sums, ns, strict=True)]
    out = Band()
    mids, widths = [math.nan] * count, [math.nan] * count
    for b in range(count):
        values = [row[b] for row in rows.values() if not math.isnan(row[b])]
        if not values:
            continue
        mids[b] = statistics.median(values)
        widths[b] = max(values) - min(values)
        out.x.append(lo + (b + 0.5) * width)
        out.lo.append(min(values))
        out.mid.append(mids[b])
        out.hi.append(max(values))
    for rank, row in rows.items():
        dists = [
            abs(v - mids[b]) / widths[b] if widths[b] > 0 else 0.0
            for b, v in enumerate(row)
            if not math.isnan(v)
        ]
        if dists:
            out.deviation[rank] = sum(dists) / len(dists)
    return out


def most_deviating(deviation: Mapping[int, float], count: int = DEVIATING) -> list[int]:
    """At most *count* ranks that stray from the others, the farthest first (ties by rank):
    by more than DEVIATION_FACTOR x the median rank's distance and DEVIATION_FLOOR."""
    typical = statistics.median(deviation.values()) if deviation else 0.0
    bar = max(DEVIATION_FLOOR, DEVIATION_FACTOR * typical)
    ranked = sorted((r for r, d in deviation.items() if d > bar), key=lambda r: (-deviation[r], r))
    return ranked[:count]


# The ranks x time heatmap (extension/src/chart/heatmap.ts and band.ts heatOf/heatColor):
# a row per rank, a column per bucket of x, each cell the rank's mean there, coloured
# against the median of every cell on a log scale, a slow rank a red line across the run.
HEAT_SERIES = {
    "outside": "step − comm time (s)",
    "step_time": "step time (s)",
}
HEAT_SLOW = (214, 39, 40)  # twice the median or more
HEAT_FAST = (31, 119, 180)  # half the median or less


@dataclass
class Heat:
    """Rows follow ``ranks``; each row ``columns`` long (NaN: no value yet)."""

    key: str
    ranks: list[int]
    lo: float
    hi: float
    rows: list[list[float]]
    median: float


def heat_series(records: Mapping[int, Sequence[Record]]) -> tuple[str, Series]:
    """Each rank's (steps, values) of step time minus comm time where any rank reports
    comm time (in lockstep DDP every step time is the same: a straggler shows only in
    the time outside the all-reduce), else of step time: the live heatmap's default."""
    comm = any(r.comm_time is not None for recs in records.values() for r in recs)
    key = "outside" if comm else "step_time"
    out: dict[int, tuple[list[float], list[float]]] = {}
    for rank, recs in records.items():
        xs, ys = [], []
        for i, r in enumerate(recs):
            if r.step_time is None or not math.isfinite(r.step_time):
                continue
            value = r.step_time
            if comm:
                value = max(0.0, value - min(r.comm_time or 0.0, value))
            xs.append(float(r.step if r.step is not None else i))
            ys.append(value)
        if xs:
            out[rank] = (xs, ys)
    return key, out


def _fill_gaps(row: list[float]) -> None:
    """Empty cells between two of a rank's values take the earlier one (a thinned or
    folded rank is still one line), as the live heatmap's."""
    end = len(row) - 1
    while end >= 0 and math.isnan(row[end]):
        end -= 1
    last = math.nan
    for i in range(end):
        if math.isnan(row[i]):
            row[i] = last
        else:
            last = row[i]


def heat_of(records: Mapping[int, Sequence[Record]], columns: int) -> Heat | None:
    """The ranks x steps matrix of heat_series(*records*) over at most *columns* buckets
    (about one point of a rank per bucket, as the band), or None without step times."""
    key, series = heat_series(records)
    xs = [x for pts, _ in series.values() for x in pts]
    if not xs:
        return None
    lo, hi = min(xs), max(xs)
    count = max(1, min(columns, round(statistics.median(len(p) for p, _ in series.values()))))
    width = (hi - lo) / count or 1.0
    ranks = sorted(series)
    rows = []
    for rank in ranks:
        sums, ns = [0.0] * count, [0] * count
        for x, v in zip(*series[rank], strict=True):
            b = min(count - 1, max(0, math.floor((x - lo) / width)))
            sums[b] += v
            ns[b] += 1
        row = [s / n if n else math.nan for s, n in zip(sums, ns, strict=True)]
        _fill_gaps(row)
        rows.append(row)
    cells = [v for row in rows for v in row if not math.isnan(v)]
    return Heat(key, ranks, lo, lo + width * count, rows, statistics.median(cells))


def heat_shade(value: float, mid: float) -> float:
    """-1 (half the median or less) .. 0 (the median) .. 1 (twice or more), log2."""
    ratio = value / mid if mid > 0 and value > 0 else (2.0 if value > mid else 0.5)
    return max(-1.0, min(1.0, math.log2(ratio)))


def heat_rgba(
    value: float, mid: float, base: tuple[float, float, float, float]
) -> tuple[float, float, float, float]:
    """A cell's colour (0..1 RGBA): *base* at the median (the theme's: a PNG that reads on
    a light and a dark page gives a translucent grey), a full red or blue at the ends."""
    if math.isnan(value):
        return (0.0, 0.0, 0.0, 0.0)
    t = heat_shade(value, mid)
    end = HEAT_SLOW if t >= 0 else HEAT_FAST
    k = abs(t)
    rgb = [b + (e / 255 - b) * k for b, e in zip(base[:3], end, strict=True)]
    return (rgb[0], rgb[1], rgb[2], base[3] + (1 - base[3]) * k)


def hottest(heat: Heat) -> int | None:
    """The rank whose row is slowest on the whole (highest mean of its cells)."""
    best, top = None, -math.inf
    for rank, row in zip(heat.ranks, heat.rows, strict=True):
        cells = [v for v in row if not math.isnan(v)]
        if cells and sum(cells) / len(cells) > top:
            best, top = rank, sum(cells) / len(cells)
    return best
