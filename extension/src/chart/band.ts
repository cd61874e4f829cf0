/**
 * The chart at scale: beyond BANDED_BEYOND ranks a curve per rank is a tangle, so the
 * chart draws the median across ranks and their min-max band, plus the few ranks that
 * deviate most (named), and a ranks x time heatmap where a slow rank is a line.
 *
 * Both are built by bucketing x (step or time) rather than matching steps: the ranks'
 * records may be thinned at different strides (live.py's envelopes) and, on a time axis,
 * no two ranks share an x. The rule is the same in the static picture
 * (dist_notebook/display/final.py). Pure computations: no DOM, unit-tested under node.
 */
import { IPoint, IRange, xOf, XAxis } from './data';

/** Ranks beyond which the chart is banded (as `%dist_cluster status` is by node). */
export const BANDED_BEYOND = 8;
/** How many of the most deviating ranks the banded chart names and draws, at most. */
export const DEVIATING = 3;
/**
 * A rank is named only when it strays from the median more than this multiple of the
 * median rank's distance, and by more than DEVIATION_FLOOR of the band's width: ranks
 * spread evenly (the lowest and highest are the band's edges) name nobody.
 */
export const DEVIATION_FACTOR = 3;
export const DEVIATION_FLOOR = 0.1;

/** One bucket of the band: x (its centre), the ranks' min, median and max. */
export interface IBandPoint {
  x: number;
  lo: number;
  mid: number;
  hi: number;
}

export interface IBand {
  points: IBandPoint[];
  /** Per rank: its mean distance to the median, in units of the band's width. */
  deviation: Map<number, number>;
}

function median(values: number[]): number {
  const v = [...values].sort((a, b) => a - b);
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

/** The x range of *series* (or *range*), and a bucket count with about one point of a
 * rank per bucket, at most *buckets*. */
function grid(
  series: ReadonlyMap<number, readonly IPoint[]>,
  axis: XAxis,
  t0: number,
  range: IRange | null,
  buckets: number
): { lo: number; width: number; count: number } | null {
  let lo = Infinity;
  let hi = -Infinity;
  const lengths: number[] = [];
  for (const points of series.values()) {
    let n = 0;
    for (const p of points) {
      const x = xOf(p, axis, t0);
      if (range && (x < range.lo || x > range.hi)) {
        continue;
      }
      lo = Math.min(lo, x);
      hi = Math.max(hi, x);
      n += 1;
    }
    if (n) {
      lengths.push(n);
    }
  }
  if (!lengths.length) {
    return null;
  }
  if (range) {
    lo = range.lo;
    hi = range.hi;
  }
  const count = Math.max(1, Math.min(buckets, Math.round(median(lengths))));
  return { lo, width: (hi - lo) / count || 1, count };
}

/**
 * Per rank and bucket, the mean of the rank's finite values there (NaN: none).
 * Rows follow *ranks*; a row is *count* long.
 */
export function bucketMeans(
  series: ReadonlyMap<number, readonly IPoint[]>,
  ranks: readonly number[],
  axis: XAxis,
  t0: number,
  lo: number,
  width: number,
  count: number,
  range: IRange | null = null
): Float64Array[] {
  return ranks.map(rank => {
    const sums = new Float64Array(count);
    const ns = new Float64Array(count);
    for (const p of series.get(rank) ?? []) {
      const x = xOf(p, axis, t0);
      if (!Number.isFinite(p.value) || (range && (x < range.lo || x > range.hi))) {
        continue;
      }
      const b = Math.min(count - 1, Math.max(0, Math.floor((x - lo) / width)));
      sums[b] += p.value;
      ns[b] += 1;
    }
    return sums.map((s, i) => (ns[i] ? s / ns[i] : NaN));
  });
}

/**
 * The median and min-max band of *series* (one per rank) over at most *buckets* buckets
 * of x, and how far each rank strays from the median (see IBand.deviation).
 */
export function bandOf(
  series: ReadonlyMap<number, readonly IPoint[]>,
  axis: XAxis,
  t0: number,
  range: IRange | null,
  buckets: number
): IBand {
  const deviation = new Map<number, number>();
  const g = grid(series, axis, t0, range, buckets);
  if (g === null) {
    return { points: [], deviation };
  }
  const ranks = [...series.keys()];
  const rows = bucketMeans(series, ranks, axis, t0, g.lo, g.width, g.count, range);
  const points: IBandPoint[] = [];
  const mids = new Float64Array(g.count).fill(NaN);
  const widths = new Float64Array(g.count).fill(NaN);
  for (let b = 0; b < g.count; b++) {
    const values = rows.map(row => row[b]).filter(v => !Number.isNaN(v));
    if (!values.length) {
      continue;
    }
    const lo = Math.min(...values);
    const hi = Math.max(...values);
    mids[b] = median(values);
    widths[b] = hi - lo;
    points.push({ x: g.lo + (b + 0.5) * g.width, lo, mid: mids[b], hi });
  }
  ranks.forEach((rank, i) => {
    let sum = 0;
    let n = 0;
    rows[i].forEach((v, b) => {
      if (!Number.isNaN(v)) {
        sum += widths[b] > 0 ? Math.abs(v - mids[b]) / widths[b] : 0;
        n += 1;
      }
    });
    if (n) {
      deviation.set(rank, sum / n);
    }
  });
  return { points, deviation };
}

/**
 * At most *count* ranks that stray from the others (largest first, ties by rank): by
 * more than DEVIATION_FACTOR x the median rank's distance and DEVIATION_FLOOR.
 */
export function mostDeviating(
  deviation: ReadonlyMap<number, number>,
  count = DEVIATING
): number[] {
  const typical = median([...deviation.values()].concat(deviation.size ? [] : [0]));
  const bar = Math.max(DEVIATION_FLOOR, DEVIATION_FACTOR * typical);
  return [...deviation.entries()]
    .filter(([, d]) => d > bar)
    .sort((a, b) => b[1] - a[1] || a[0] - b[0])
    .slice(0, count)
    .map(([rank]) => rank);
}

/** A closed SVG area between the band's lo and hi; a bucket without values breaks it. */
export function bandPath(
  points: readonly IBandPoint[],
  sx: (x: number) => number,
  sy: (y: number) => number,
  log: boolean
): string {
  const ok = (p: IBandPoint): boolean =>
    Number.isFinite(p.lo) && Number.isFinite(p.hi) && (!log || p.lo > 0);
  const runs: IBandPoint[][] = [];
  let run: IBandPoint[] = [];
  for (const p of points) {
    if (ok(p)) {
      run.push(p);
    } else if (run.length) {
      runs.push(run);
      run = [];
    }
  }
  if (run.length) {
    runs.push(run);
  }
  return runs
    .map(r => {
      const f = (v: number): string => v.toFixed(1);
      const top = r.map((p, i) => `${i ? 'L' : 'M'}${f(sx(p.x))} ${f(sy(p.hi))}`);
      const bottom = [...r].reverse().map(p => `L${f(sx(p.x))} ${f(sy(p.lo))}`);
      return `${top.join('')}${bottom.join('')}Z`;
    })
    .join('');
}

/** A heatmap: a row per rank, a column per bucket of x; NaN where a rank has nothing. */
export interface IHeat {
  ranks: number[];
  x: IRange;
  columns: number;
  rows: Float64Array[];
  /** The median of every cell: the colour scale's centre. */
  median: number;
}

/**
 * Empty cells between two of a rank's values take the earlier one: a rank whose records
 * came thinned (envelopes, live.py) is still one line, not a dashed one.
 */
function fillGaps(row: Float64Array): void {
  let last = NaN;
  let end = row.length - 1;
  while (end >= 0 && Number.isNaN(row[end])) {
    end -= 1;
  }
  for (let i = 0; i < end; i++) {
    if (Number.isNaN(row[i])) {
      row[i] = last;
    } else {
      last = row[i];
    }
  }
}

/** The ranks x x-buckets matrix of *series* (at most *columns* columns), or null. */
export function heatOf(
  series: ReadonlyMap<number, readonly IPoint[]>,
  axis: XAxis,
  t0: number,
  range: IRange | null,
  columns: number
): IHeat | null {
  const g = grid(series, axis, t0, range, columns);
  if (g === null) {
    return null;
  }
  const ranks = [...series.keys()].sort((a, b) => a - b);
  const rows = bucketMeans(series, ranks, axis, t0, g.lo, g.width, g.count, range);
  rows.forEach(fillGaps);
  const cells: number[] = [];
  for (const row of rows) {
    row.forEach(v => {
      if (!Number.isNaN(v)) {
        cells.push(v);
      }
    });
  }
  if (!cells.length) {
    return null;
  }
  return {
    ranks,
    x: { lo: g.lo, hi: g.lo + g.width * g.count },
    columns: g.count,
    rows,
    median: median(cells)
  };
}

/** The median cell's colour where the theme gives none (`--dn-heat-mid`, chart.css). */
export const HEAT_MID: readonly number[] = [236, 236, 230];

/**
 * A cell's colour: the median is the theme's neutral *pale* (a light grey on a light
 * theme, a dark one on a dark theme), twice the median (or more) a full red, half (or
 * less) a full blue, on a log scale (a rank 30% slower stands out as a line).
 */
export function heatColor(
  value: number,
  mid: number,
  pale: readonly number[] = HEAT_MID
): string {
  if (Number.isNaN(value)) {
    return 'transparent';
  }
  const ratio = mid > 0 && value > 0 ? value / mid : value > mid ? 2 : 0.5;
  const t = Math.max(-1, Math.min(1, Math.log2(ratio)));
  const end = t >= 0 ? [214, 39, 40] : [31, 119, 180];
  const k = Math.abs(t);
  const c = pale.map((p, i) => Math.round(p + (end[i] - p) * k));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}
