/**
 * Per-rank series of one run, built from incremental metrics records, and curve
 * geometry. Derived measures (samples/s, step time, comm share, straggler) are never
 * computed here: the server's summary (dist_notebook/protocol.py) carries them.
 *
 * No DOM and no JupyterLab imports here: this module is unit-tested under node.
 */
import type { ISeqRecord } from './contracts';

/**
 * A record of version 1 of the API: the user's metrics beside the system fields. The
 * series still read it (a store written before version 2); the server sends ISeqRecord.
 */
export interface IMetricRecord {
  seq: number;
  rank: number;
  step: number | null;
  time: number;
  [metric: string]: number | string | boolean | null | undefined;
}

const SYSTEM = ['step_time', 'comm_time', 'samples'] as const;

/**
 * A record in the protocol's shape (the user's metrics apart under `metrics`), from
 * either that shape or the older flat one (every metric beside rank, step and time).
 */
export function normalize(record: IMetricRecord | ISeqRecord): ISeqRecord {
  if (typeof record.metrics === 'object' && record.metrics !== null) {
    return record as ISeqRecord;
  }
  const flat = record as IMetricRecord;
  const metrics: { [name: string]: number } = {};
  for (const [name, value] of Object.entries(flat)) {
    if (typeof value === 'number' && !NOT_METRICS.has(name) && !SYSTEM_SET.has(name)) {
      metrics[name] = value;
    }
  }
  const field = (name: string): number | null => num(flat[name]);
  return {
    seq: flat.seq,
    rank: flat.rank,
    step: flat.step,
    time: flat.time,
    step_time: field('step_time'),
    comm_time: field('comm_time'),
    samples: field('samples'),
    metrics,
    gpu: null
  };
}

function jsonNum(value: unknown): number | null {
  if (value === 'nan' || value === 'inf' || value === '-inf') {
    return null; // a gap: not a value for the panel's numbers
  }
  return num(value);
}

/** One point of a curve. */
export interface IPoint {
  step: number;
  value: number;
}

function num(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** Fields of a record that are not metric values. */
const NOT_METRICS = new Set(['seq', 'rank', 'step', 'time']);
const SYSTEM_SET = new Set<string>(SYSTEM);

class RankSeries {
  /** Every numeric metric the rank reported, by name (system fields too). */
  readonly curves = new Map<string, IPoint[]>();
  count = 0;

  add(record: ISeqRecord): void {
    const step = num(record.step) ?? this.count;
    const values: [string, unknown][] = [
      ...Object.entries(record.metrics),
      ...SYSTEM.map((name): [string, unknown] => [name, record[name]])
    ];
    for (const [name, raw] of values) {
      const value = jsonNum(raw);
      if (value !== null) {
        this.push(name, step, value);
      }
    }
    this.count += 1;
  }

  private push(name: string, step: number, value: number): void {
    let curve = this.curves.get(name);
    if (curve === undefined) {
      curve = [];
      this.curves.set(name, curve);
    }
    curve.push({ step, value });
  }
}

/**
 * The series of one run, per rank. Records are added in sequence order, as the
 * metrics route hands them out; `lastSeq` is what to ask for next.
 */
export class RunSeries {
  private readonly _ranks = new Map<number, RankSeries>();
  private readonly _records: ISeqRecord[] = [];
  private _lastSeq = 0;

  constructor(readonly runId: string) {}

  get lastSeq(): number {
    return this._lastSeq;
  }

  /** Every record so far, in sequence order, in the protocol's shape (for the chart). */
  get records(): readonly ISeqRecord[] {
    return this._records;
  }

  /** Add records; returns whether any was new. */
  add(records: readonly (IMetricRecord | ISeqRecord)[], lastSeq?: number): boolean {
    let changed = false;
    for (const raw of records) {
      if (raw.seq <= this._lastSeq) {
        continue; // already seen: a retried request
      }
      const record = normalize(raw);
      this._records.push(record);
      let series = this._ranks.get(record.rank);
      if (series === undefined) {
        series = new RankSeries();
        this._ranks.set(record.rank, series);
      }
      series.add(record);
      this._lastSeq = record.seq;
      changed = true;
    }
    if (lastSeq !== undefined && lastSeq > this._lastSeq) {
      this._lastSeq = lastSeq;
    }
    return changed;
  }

  /** The ranks that reported anything, in order. */
  get ranks(): number[] {
    return [...this._ranks.keys()].sort((a, b) => a - b);
  }

  /** The curve of *metric* (loss, samples_per_s, ...) for *rank*. */
  curve(rank: number, metric = 'loss'): readonly IPoint[] {
    return this._ranks.get(rank)?.curves.get(metric) ?? [];
  }

  /** The names of all metrics any rank reported, loss first. */
  get metrics(): string[] {
    const names = new Set<string>();
    for (const series of this._ranks.values()) {
      for (const name of series.curves.keys()) {
        names.add(name);
      }
    }
    return [...names].sort((a, b) =>
      a === 'loss' ? -1 : b === 'loss' ? 1 : a.localeCompare(b)
    );
  }
}

/** A short number: 3 significant digits, with k/M suffixes above 10^4. */
export function formatNumber(value: number | null): string {
  if (value === null) {
    return '–';
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
  return value.toPrecision(3);
}

export function formatBytes(bytes: number | null): string {
  if (bytes === null) {
    return '–';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}
