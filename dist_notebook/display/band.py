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
