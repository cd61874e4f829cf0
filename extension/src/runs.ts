/**
 * Pure functions over runs and records, apart from the DOM (tested with node --test):
 * the run list's filters and the overlay's mean curve of a run.
 */
import type { IRecord } from './protocol';
import type { IRunModel, ISeqRecord } from './contracts';

/** The filters a user set, as plain values (tested apart from the DOM). */
export interface IRunFilter {
  text: string;
  state: string;
  cluster: string;
  /** Only runs started on or after this day (YYYY-MM-DD), '' for all. */
  since: string;
}

export function filterRuns(runs: readonly IRunModel[], f: IRunFilter): IRunModel[] {
  const text = f.text.trim().toLowerCase();
  const since = f.since ? new Date(f.since + 'T00:00').getTime() / 1000 : null;
  return runs.filter(
    r =>
      (!text || r.name.toLowerCase().includes(text) || r.id.startsWith(text)) &&
      (!f.state || r.state === f.state) &&
      (!f.cluster || r.cluster_id === f.cluster) &&
      (since === null || Number.isNaN(since) || r.started >= since)
  );
}

type Num = number | string | null;

function value(v: Num | undefined): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

/** One record per step of a run: the mean over its ranks of each value, as series *key*. */
export function meanPerStep(records: readonly ISeqRecord[], key: number): IRecord[] {
  const bySteps = new Map<number, ISeqRecord[]>();
  for (const r of records) {
    if (r.step !== null) {
      const list = bySteps.get(r.step) ?? [];
      list.push(r);
      bySteps.set(r.step, list);
    }
  }
  const mean = (list: ISeqRecord[], get: (r: ISeqRecord) => Num | undefined) => {
    const values = list.map(r => value(get(r))).filter((v): v is number => v !== null);
    return values.length ? values.reduce((a, b) => a + b, 0) / values.length : null;
  };
  return [...bySteps.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([step, list]) => {
      const names = new Set(list.flatMap(r => Object.keys(r.metrics)));
      const metrics: { [name: string]: number } = {};
      for (const name of names) {
        const m = mean(list, r => r.metrics[name]);
        if (m !== null) {
          metrics[name] = m;
        }
      }
      return {
        rank: key,
        step,
        time: Math.min(...list.map(r => r.time)),
        step_time: mean(list, r => r.step_time),
        comm_time: mean(list, r => r.comm_time),
        samples: mean(list, r => r.samples),
        gpu: null,
        metrics
      };
    });
}
