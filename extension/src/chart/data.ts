/**
 * The chart's data: per-rank series built from protocol records, and the pure
 * computations drawing needs (mean over ranks, smoothing, min/max downsampling,
 * extents, scales, ticks, nearest point, SVG paths).
 *
 * No DOM and no JupyterLab imports here: this module is unit-tested under node.
 * Derived measures (samples/s, step time, comm share, straggler) are never computed
 * here: they come from the run's summary (dist_notebook/protocol.py).
 */
import type { IRecord, JsonNumber } from '../protocol';

/** What the x axis shows: the step, or seconds since the run's first record. */
export type XAxis = 'step' | 'time';

/** One point of a series; a non-finite value is a gap. */
export interface IPoint {
  step: number;
  time: number;
  value: number;
}

/** A closed interval of data values. */
export interface IRange {
  lo: number;
  hi: number;
}

/** System fields a user may draw besides their own metrics (keys are prefixed). */
export const SYSTEM_SERIES: { [key: string]: string } = {
  'system:step_time': 'step time (s)',
  'system:comm_time': 'comm time (s)',
  'system:samples': 'samples',
  'system:gpu_util': 'GPU utilisation',
  'system:gpu_mem': 'GPU memory (bytes)',
  'system:peak_mem': 'peak memory (bytes)'
};

/** The value of a system series (a key of SYSTEM_SERIES) in *record*, or null. */
export function systemValue(record: IRecord, key: string): number | null {
  switch (key) {
    case 'system:step_time':
      return toNumber(record.step_time);
    case 'system:comm_time':
      return toNumber(record.comm_time);
    case 'system:samples':
      return toNumber(record.samples);
    case 'system:gpu_util':
      return toNumber(record.gpu?.util);
    case 'system:peak_mem':
      return toNumber(record.peak_mem ?? null);
    case 'system:gpu_mem':
      return toNumber(record.gpu?.mem);
    default:
      return null;
  }
}

/** The number a JSON float stands for: "nan"/"inf"/"-inf" included; null if none. */
export function toNumber(value: JsonNumber | null | undefined): number | null {
  if (typeof value === 'number') {
    return value;
  }
  if (value === 'nan') {
    return NaN;
  }
  if (value === 'inf') {
    return Infinity;
  }
  if (value === '-inf') {
    return -Infinity;
  }
  return null;
}

/** A rank's colour slot, the same in the cell, the panel and the static picture. */
export const PALETTE_SIZE = 8;
export function colorIndex(rank: number): number {
  return ((rank % PALETTE_SIZE) + PALETTE_SIZE) % PALETTE_SIZE;
}

class RankData {
  readonly series = new Map<string, IPoint[]>();
  lastTime = -Infinity;
  count = 0;

  push(name: string, point: IPoint): void {
    let points = this.series.get(name);
    if (points === undefined) {
      points = [];
      this.series.set(name, points);
    }
    points.push(point);
  }
}

/**
 * Every record of a run, per rank and per metric. Records older than a rank's newest
 * are dropped, so a history resent after new records never doubles a point.
 */
export class ChartData {
  private readonly _ranks = new Map<number, RankData>();
  private readonly _meanCache = new Map<string, IPoint[]>();
  private _t0: number | null = null;
  private _version = 0;

  /** Changes whenever a point is added: views redraw only when it moved. */
  get version(): number {
    return this._version;
  }

  /** Time of the run's first record (seconds since the epoch), or null. */
  get t0(): number | null {
    return this._t0;
  }

  clear(): void {
    this._ranks.clear();
    this._meanCache.clear();
    this._t0 = null;
    this._version += 1;
  }

  /** Add records; returns how many were new. */
  add(records: readonly IRecord[]): number {
    let added = 0;
    for (const record of records) {
      let rank = this._ranks.get(record.rank);
      if (rank === undefined) {
        rank = new RankData();
        this._ranks.set(record.rank, rank);
      }
      if (record.time <= rank.lastTime) {
        continue;
      }
      rank.lastTime = record.time;
      const step = record.step ?? rank.count;
      rank.count += 1;
      this._t0 = this._t0 === null ? record.time : Math.min(this._t0, record.time);
      for (const [name, raw] of Object.entries(record.metrics)) {
        const value = toNumber(raw);
        if (value !== null) {
          rank.push(name, { step, time: record.time, value });
        }
      }
      for (const key of Object.keys(SYSTEM_SERIES)) {
        const value = systemValue(record, key);
        if (value !== null) {
          rank.push(key, { step, time: record.time, value });
        }
      }
      added += 1;
    }
    if (added) {
      this._version += 1;
      this._meanCache.clear();
    }
    return added;
  }

  /** The ranks that reported anything, in order. */
  get ranks(): number[] {
    return [...this._ranks.keys()].sort((a, b) => a - b);
  }

  /** Records kept for *rank*. */
  count(rank: number): number {
    return this._ranks.get(rank)?.count ?? 0;
  }

  /** The user's metric names (loss first), then the system series any rank has. */
  get metrics(): string[] {
    const user = new Set<string>();
    const system = new Set<string>();
    for (const rank of this._ranks.values()) {
      for (const name of rank.series.keys()) {
        (name.startsWith('system:') ? system : user).add(name);
      }
    }
    const sorted = [...user].sort((a, b) =>
      a === 'loss' ? -1 : b === 'loss' ? 1 : a.localeCompare(b)
    );
    return [...sorted, ...Object.keys(SYSTEM_SERIES).filter(k => system.has(k))];
  }

  series(rank: number, metric: string): readonly IPoint[] {
    return this._ranks.get(rank)?.series.get(metric) ?? [];
  }

  /** The metric averaged over the ranks at each step every rank reported it. */
  mean(metric: string): readonly IPoint[] {
    const cached = this._meanCache.get(metric);
    if (cached !== undefined) {
      return cached;
    }
    const ranks = this.ranks.map(r => this.series(r, metric)).filter(s => s.length);
    const out = meanOf(ranks);
    this._meanCache.set(metric, out);
    return out;
  }
}

/** The mean at each step all of *series* have (the time is the latest of them). */
export function meanOf(series: readonly (readonly IPoint[])[]): IPoint[] {
  if (series.length === 0) {
    return [];
  }
  const sums = new Map<number, { sum: number; n: number; time: number }>();
  for (const points of series) {
    for (const p of points) {
      const acc = sums.get(p.step);
      if (acc === undefined) {
        sums.set(p.step, { sum: p.value, n: 1, time: p.time });
      } else {
        acc.sum += p.value;
        acc.n += 1;
        acc.time = Math.max(acc.time, p.time);
      }
    }
  }
  const out: IPoint[] = [];
  for (const [step, acc] of sums) {
    if (acc.n === series.length) {
      out.push({ step, time: acc.time, value: acc.sum / acc.n });
    }
  }
  return out.sort((a, b) => a.step - b.step);
}

/**
 * Exponential moving average with the start-up bias removed (as TensorBoard's
 * smoothing): *weight* 0 leaves the series as it is, 0.99 smooths hard. Non-finite
 * values stay gaps and do not move the average.
 */
export function smooth(points: readonly IPoint[], weight: number): readonly IPoint[] {
  if (weight <= 0 || points.length === 0) {
    return points;
  }
  const w = Math.min(weight, 0.999);
  let avg = 0;
  let n = 0;
  return points.map(p => {
    if (!Number.isFinite(p.value)) {
      return p;
    }
    avg = avg * w + (1 - w) * p.value;
    n += 1;
    return { ...p, value: avg / (1 - Math.pow(w, n)) };
  });
}

export function xOf(p: IPoint, axis: XAxis, t0: number): number {
  return axis === 'step' ? p.step : p.time - t0;
}

/**
 * At most about 2 x *buckets* points between *range* (x values), by keeping each
 * bucket's lowest and highest value in their order: spikes stay visible, the line
 * costs at most a few points per pixel. A bucket with a gap keeps a gap.
 */
export function downsample(
  points: readonly IPoint[],
  buckets: number,
  axis: XAxis,
  t0: number,
  range: IRange | null = null
): IPoint[] {
  const inside = range
    ? points.filter(p => {
        const x = xOf(p, axis, t0);
        return x >= range.lo && x <= range.hi;
      })
    : [...points];
  if (inside.length <= 2 * buckets || buckets < 1) {
    return inside;
  }
  const lo = xOf(inside[0], axis, t0);
  const width = (xOf(inside[inside.length - 1], axis, t0) - lo) / buckets || 1;
  const out: IPoint[] = [];
  let bucket = -1;
  let min: IPoint | null = null;
  let max: IPoint | null = null;
  let gap: IPoint | null = null;
  const flush = (): void => {
    const kept = [min, max, gap].filter((p): p is IPoint => p !== null);
    kept.sort((a, b) => xOf(a, axis, t0) - xOf(b, axis, t0));
    for (const p of kept) {
      if (out[out.length - 1] !== p) {
        out.push(p);
      }
    }
    min = max = gap = null;
  };
  for (const p of inside) {
    const b = Math.min(buckets - 1, Math.floor((xOf(p, axis, t0) - lo) / width));
    if (b !== bucket) {
      flush();
      bucket = b;
    }
    if (!Number.isFinite(p.value)) {
      gap = gap ?? p;
    } else {
      if (min === null || p.value < min.value) {
        min = p;
      }
      if (max === null || p.value > max.value) {
        max = p;
      }
    }
  }
  flush();
  const last = inside[inside.length - 1];
  if (out[out.length - 1] !== last) {
    out.push(last);
  }
  return out;
}

/** Whether *value* can be drawn on a linear (or, with *log*, a log) axis. */
export function drawable(value: number, log: boolean): boolean {
  return Number.isFinite(value) && (!log || value > 0);
}

/** The x and y ranges of *series*, widened where empty; null if nothing is drawable. */
export function extentOf(
  series: readonly (readonly IPoint[])[],
  axis: XAxis,
  t0: number,
  log: boolean
): { x: IRange; y: IRange } | null {
  let x0 = Infinity;
  let x1 = -Infinity;
  let y0 = Infinity;
  let y1 = -Infinity;
  for (const points of series) {
    for (const p of points) {
      if (!drawable(p.value, log)) {
        continue;
      }
      const x = xOf(p, axis, t0);
      x0 = Math.min(x0, x);
      x1 = Math.max(x1, x);
      y0 = Math.min(y0, p.value);
      y1 = Math.max(y1, p.value);
    }
  }
  if (x0 === Infinity) {
    return null;
  }
  if (x1 === x0) {
    x1 = x0 + 1;
  }
  if (y1 === y0) {
    if (log) {
      y0 /= 2;
      y1 *= 2;
    } else {
      const pad = Math.abs(y0) * 0.05 || 1;
      y0 -= pad;
      y1 += pad;
    }
  } else if (!log) {
    const pad = (y1 - y0) * 0.04;
    y0 -= pad;
    y1 += pad;
  }
  return { x: { lo: x0, hi: x1 }, y: { lo: y0, hi: y1 } };
}

/** A map from data values in *domain* to pixels in [*from*, *to*] (log: base 10). */
export function scale(
  domain: IRange,
  from: number,
  to: number,
  log = false
): (value: number) => number {
  const f = log ? Math.log10 : (v: number) => v;
  const d0 = f(domain.lo);
  const d1 = f(domain.hi);
  const k = (to - from) / (d1 - d0 || 1);
  return v => from + (f(v) - d0) * k;
}

/** Round values with one step, about *count* of them (at least 3) in *range*. */
function linearTicks(range: IRange, count: number): number[] {
  const span = range.hi - range.lo;
  const raw = span / Math.max(1, count);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const steps = [0.1, 0.2, 0.5, 1, 2, 5, 10].map(m => m * mag);
  let index = steps.findIndex(s => s >= raw);
  index = index < 0 ? steps.length - 1 : index;
  for (; ; index--) {
    const step = steps[index];
    const out: number[] = [];
    for (
      let v = Math.ceil(range.lo / step - 1e-9) * step;
      v <= range.hi + step * 1e-9;
      v += step
    ) {
      out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    }
    // Fewer than 3 labels say too little of a range: take the next finer step.
    if (out.length >= 3 || index === 0) {
      return out;
    }
  }
}

/**
 * About *count* round tick values in *range*, never fewer than 3 for a range that is not
 * empty. Log: powers of ten (with 2 and 5 within three decades); a range too narrow for
 * 3 of those gets evenly spaced round values, placed on the log scale.
 */
export function ticks(range: IRange, count: number, log = false): number[] {
  if (!(range.hi > range.lo)) {
    return [range.lo];
  }
  if (log) {
    const out: number[] = [];
    const e0 = Math.floor(Math.log10(range.lo));
    const e1 = Math.ceil(Math.log10(range.hi));
    const mults = e1 - e0 <= 3 ? [1, 2, 5] : [1];
    for (let e = e0; e <= e1; e++) {
      for (const m of mults) {
        const v = m * Math.pow(10, e);
        if (v >= range.lo * (1 - 1e-9) && v <= range.hi * (1 + 1e-9)) {
          out.push(v);
        }
      }
    }
    return out.length >= 3 ? out : linearTicks(range, count).filter(v => v > 0);
  }
  return linearTicks(range, count);
}

/**
 * One format for every label of an axis: the same number of decimals (from the smallest
 * gap between ticks), a common k/M suffix for large values, e-notation for tiny ones.
 */
export function tickFormat(values: readonly number[]): (value: number) => string {
  const finite = values.filter(v => Number.isFinite(v));
  if (finite.length === 0) {
    return formatNumber;
  }
  const top = Math.max(...finite.map(v => Math.abs(v)));
  let gap = Infinity;
  for (let i = 1; i < finite.length; i++) {
    gap = Math.min(gap, Math.abs(finite[i] - finite[i - 1]));
  }
  if (!Number.isFinite(gap) || gap === 0) {
    gap = top || 1;
  }
  const [div, suffix] = top >= 1e6 ? [1e6, 'M'] : top >= 1e4 ? [1e3, 'k'] : [1, ''];
  const tiny = top > 0 && top < 1e-3;
  if (tiny) {
    const mag = Math.pow(10, Math.floor(Math.log10(top)));
    const digits = Math.min(3, Math.max(0, Math.ceil(Math.log10(mag / gap) - 1e-9)));
    return v => (v === 0 ? '0' : v.toExponential(digits));
  }
  const decimals = Math.min(6, Math.max(0, Math.ceil(-Math.log10(gap / div) - 1e-9)));
  return v => `${(v / div).toFixed(decimals)}${suffix}`;
}

/** The point of *points* (sorted by x) nearest to *x*, or null. */
export function nearest(
  points: readonly IPoint[],
  x: number,
  axis: XAxis,
  t0: number
): IPoint | null {
  if (points.length === 0) {
    return null;
  }
  let lo = 0;
  let hi = points.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xOf(points[mid], axis, t0) < x) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const before = points[Math.max(0, lo - 1)];
  const at = points[lo];
  return Math.abs(xOf(before, axis, t0) - x) <= Math.abs(xOf(at, axis, t0) - x)
    ? before
    : at;
}

/** An SVG path through *points*; a gap (or a value a log axis cannot show) breaks it. */
export function linePath(
  points: readonly IPoint[],
  sx: (x: number) => number,
  sy: (y: number) => number,
  axis: XAxis,
  t0: number,
  log: boolean
): string {
  let out = '';
  let pen = false;
  for (const p of points) {
    if (!drawable(p.value, log)) {
      pen = false;
      continue;
    }
    const x = sx(xOf(p, axis, t0)).toFixed(1);
    const y = sy(p.value).toFixed(1);
    out += `${pen ? 'L' : 'M'}${x} ${y}`;
    pen = true;
  }
  return out;
}

/** A short number: 3 significant digits, k/M suffixes from 10^4, e-notation below 10^-3. */
export function formatNumber(value: number | null): string {
  if (value === null) {
    return '–';
  }
  if (!Number.isFinite(value)) {
    return String(value);
  }
  const abs = Math.abs(value);
  if (abs >= 1e6) {
    return `${(value / 1e6).toFixed(1)}M`;
  }
  if (abs >= 1e4) {
    return `${(value / 1e3).toFixed(1)}k`;
  }
  if (abs >= 100 || Number.isInteger(value)) {
    return value.toFixed(0);
  }
  if (abs !== 0 && abs < 1e-3) {
    return value.toExponential(1);
  }
  return value.toPrecision(3);
}
