/**
 * Models: poll the REST API and emit `changed`; views only render them.
 */
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import type { IRunSummary } from './protocol';
import {
  fetchClusters,
  fetchMetrics,
  fetchRun,
  fetchRuns,
  fetchSummary
} from './request';
import { RunSeries } from './series';
import { ACTIVE_RUN_STATES, ENDED_CLUSTER_STATES } from './protocol';
import type { IClusterModel, IRunDetailModel, IRunModel } from './contracts';

/** Failed requests back off up to this interval. */
const MAX_BACKOFF_MS = 30 * 1000;
/** Pages of metrics fetched in one tick before the view gets to draw. */
const MAX_PAGES_PER_TICK = 10;

export function isActive(run: IRunModel): boolean {
  return ACTIVE_RUN_STATES.has(run.state);
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Fetch the metrics of *series*' run after its last sequence number, page by page. */
async function pullMetrics(series: RunSeries): Promise<boolean> {
  let changed = false;
  for (let page = 0; page < MAX_PAGES_PER_TICK; page++) {
    const answer = await fetchMetrics(series.runId, series.lastSeq);
    changed = series.add(answer.records, answer.last_seq) || changed;
    if (!answer.more) {
      break;
    }
  }
  return changed;
}

/** Shared by both models: a poll with backoff that pauses in hidden tabs. */
abstract class PollingModel implements IDisposable {
  protected readonly poll: Poll;
  private readonly _changed = new Signal<this, void>(this);
  private _error: string | null = null;

  constructor(interval: number, name: string) {
    this.poll = new Poll({
      auto: true,
      factory: () => this.tick(),
      frequency: { interval, backoff: true, max: MAX_BACKOFF_MS },
      name,
      standby: () => this.standby()
    });
  }

  /** Emitted after each poll that changed something, and on errors. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The last request's error, or null after a success. */
  get error(): string | null {
    return this._error;
  }

  get isDisposed(): boolean {
    return this.poll.isDisposed;
  }

  set interval(interval: number) {
    this.poll.frequency = { ...this.poll.frequency, interval };
  }

  /** Poll now, and resolve once that poll is done. */
  async refresh(): Promise<void> {
    await this.poll.refresh();
    await this.poll.tick;
  }

  dispose(): void {
    if (!this.isDisposed) {
      this.poll.dispose();
      Signal.clearData(this);
    }
  }

  protected standby(): boolean | 'when-hidden' {
    return 'when-hidden';
  }

  protected emit(): void {
    this._changed.emit();
  }

  /** One poll: throw to back off; return whether the view must redraw. */
  protected abstract update(): Promise<boolean>;

  private async tick(): Promise<void> {
    let changed: boolean;
    try {
      changed = await this.update();
    } catch (error) {
      this._error = describe(error);
      this.emit();
      throw error; // the poll backs off
    }
    if (changed || this._error !== null) {
      this._error = null;
      this.emit();
    }
  }
}

/**
 * What the side panel shows: all clusters, the run history, the series of the current
 * run (the newest running run, else the newest run), and the measures of that run and
 * of every run still going (one per busy cluster).
 */
export class DistModel extends PollingModel {
  private _clusters: IClusterModel[] = [];
  private _runs: IRunModel[] = [];
  private _series: RunSeries | null = null;
  private _summaries = new Map<string, IRunSummary>();
  private _snapshot = '';
  private _loaded = false;

  constructor(options: DistModel.IOptions) {
    super(options.interval, 'dist-notebook:panel');
  }

  /** Whether the server answered once: before that, the panel knows nothing. */
  get loaded(): boolean {
    return this._loaded;
  }

  get clusters(): readonly IClusterModel[] {
    return this._clusters;
  }

  /** Clusters with processes to act on, newest first. */
  get liveClusters(): IClusterModel[] {
    return this._clusters.filter(c => !ENDED_CLUSTER_STATES.has(c.state));
  }

  /** Stopped, failed and orphaned clusters: the history, newest first. */
  get endedClusters(): IClusterModel[] {
    return this._clusters.filter(c => ENDED_CLUSTER_STATES.has(c.state));
  }

  get runs(): readonly IRunModel[] {
    return this._runs;
  }

  get currentRun(): IRunModel | null {
    return this._runs.find(isActive) ?? this._runs[0] ?? null;
  }

  /** The run still going on *clusterId*, if any (newest first). */
  activeRunOf(clusterId: string): IRunModel | null {
    return this._runs.find(r => r.cluster_id === clusterId && isActive(r)) ?? null;
  }

  /** The newest run of *clusterId* that ended, if any. */
  lastRunOf(clusterId: string): IRunModel | null {
    return this._runs.find(r => r.cluster_id === clusterId && !isActive(r)) ?? null;
  }

  /** The per-rank series of the current run. */
  get series(): RunSeries | null {
    return this._series;
  }

  /** The current run's measures as the server computes them (never recomputed here). */
  get summary(): IRunSummary | null {
    const run = this.currentRun;
    return run === null ? null : this.summaryOf(run.id);
  }

  /** The server's measures of *runId*: the current run and runs still going only. */
  summaryOf(runId: string): IRunSummary | null {
    return this._summaries.get(runId) ?? null;
  }

  protected async update(): Promise<boolean> {
    const [clusters, runs] = await Promise.all([fetchClusters(), fetchRuns()]);
    this._clusters = clusters;
    this._runs = runs;
    const snapshot = JSON.stringify([clusters, runs]);
    const changed = snapshot !== this._snapshot || !this._loaded;
    this._snapshot = snapshot;
    this._loaded = true;
    const wanted = this._summaryRuns();
    for (const id of [...this._summaries.keys()]) {
      if (!wanted.includes(id)) {
        this._summaries.delete(id);
      }
    }
    if (changed) {
      // Drawn now: what exists shows at once, the curve's records follow (a long run's
      // history is pages of metrics; the clusters must not wait for them).
      this.emit();
    }

    const current = this.currentRun;
    if (current === null) {
      const dropped = this._series !== null;
      this._series = null;
      return dropped;
    }
    let fresh = false;
    if (this._series?.runId !== current.id) {
      this._series = new RunSeries(current.id);
      fresh = true;
    }
    const [grew, summaries] = await Promise.all([
      pullMetrics(this._series),
      Promise.all(wanted.map(id => fetchSummary(id)))
    ]);
    let summaryChanged = false;
    summaries.forEach((summary, i) => {
      const old = this._summaries.get(wanted[i]);
      if (JSON.stringify(summary) !== JSON.stringify(old)) {
        this._summaries.set(wanted[i], summary);
        summaryChanged = true;
      }
    });
    return grew || summaryChanged || fresh;
  }

  /** The runs whose measures the panel draws: the current run and every run going. */
  private _summaryRuns(): string[] {
    const ids = this._runs.filter(isActive).map(r => r.id);
    const current = this.currentRun;
    if (current !== null && !ids.includes(current.id)) {
      ids.push(current.id);
    }
    return ids;
  }
}

export namespace DistModel {
  export interface IOptions {
    /** Milliseconds between polls. */
    interval: number;
  }
}

/**
 * One run, for its main-area view: details and series, polled until the run ended
 * and all its metrics are in.
 */
export class RunModel extends PollingModel {
  readonly series: RunSeries;
  private _run: IRunDetailModel | null = null;
  private _complete = false;

  constructor(options: RunModel.IOptions) {
    super(options.interval, `dist-notebook:run:${options.runId}`);
    this.series = new RunSeries(options.runId);
  }

  get runId(): string {
    return this.series.runId;
  }

  get run(): IRunDetailModel | null {
    return this._run;
  }

  protected standby(): boolean | 'when-hidden' {
    return this._complete || 'when-hidden';
  }

  protected async update(): Promise<boolean> {
    const run = await fetchRun(this.runId);
    const changed = JSON.stringify(run) !== JSON.stringify(this._run);
    this._run = run;
    const more = await pullMetrics(this.series);
    // Metrics are written before the run's end state, so one last pull after the
    // end state is seen has them all.
    this._complete = !isActive(run);
    return changed || more;
  }
}

export namespace RunModel {
  export interface IOptions {
    runId: string;
    interval: number;
  }
}
