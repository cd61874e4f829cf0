/**
 * The records of one run, gathered from the metrics route's incremental pages, in the
 * protocol's shape, for the chart. Derived measures (samples/s, step time, comm share,
 * straggler) are never computed here: the server's summary (dist_notebook/protocol.py)
 * carries them.
 *
 * No DOM and no JupyterLab imports here: this module is unit-tested under node.
 */
import type { ISeqRecord } from './contracts';

/**
 * The records of one run. Records are added in sequence order, as the metrics route
 * hands them out; `lastSeq` is what to ask for next.
 */
export class RunSeries {
  private readonly _records: ISeqRecord[] = [];
  private _lastSeq = 0;

  constructor(readonly runId: string) {}

  get lastSeq(): number {
    return this._lastSeq;
  }

  /** Every record so far, in sequence order (for the chart). */
  get records(): readonly ISeqRecord[] {
    return this._records;
  }

  /** Add records; returns whether any was new. */
  add(records: readonly ISeqRecord[], lastSeq?: number): boolean {
    let changed = false;
    for (const record of records) {
      if (record.seq <= this._lastSeq) {
        continue; // already seen: a retried request
      }
      this._records.push(record);
      this._lastSeq = record.seq;
      changed = true;
    }
    if (lastSeq !== undefined && lastSeq > this._lastSeq) {
      this._lastSeq = lastSeq;
    }
    return changed;
  }
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
