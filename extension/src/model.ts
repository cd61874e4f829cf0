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
import { ACTIVE_RUN_STATES, ENDED_CLUSTER_STATES } from './types';
import type { IClusterModel, IRunDetailModel, IRunModel } from './types';

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
 * What the side panel shows: all clusters, the run history, and the series of the
 * current run (the newest running run, else the newest run).
 */
export class DistModel extends PollingModel {
  private _clusters: IClusterModel[] = [];
  private _runs: IRunModel[] = [];
  private _series: RunSeries | null = null;
  private _summary: IRunSummary | null = null;
  private _snapshot = '';

  constructor(options: DistModel.IOptions) {
    super(options.interval, 'dist-notebook:panel');
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

  /** The per-rank series of the current run. */
  get series(): RunSeries | null {
    return this._series;
  }

  /** The current run's measures as the server computes them (never recomputed here). */
  get summary(): IRunSummary | null {
    return this._summary;
  }

  protected async update(): Promise<boolean> {
    const [clusters, runs] = await Promise.all([fetchClusters(), fetchRuns()]);
    this._clusters = clusters;
    this._runs = runs;
    const snapshot = JSON.stringify([clusters, runs]);
    let changed = snapshot !== this._snapshot;
    this._snapshot = snapshot;

    const current = this.currentRun;
    if (current === null) {
      changed = changed || this._series !== null;
      this._series = null;
      this._summary = null;
      return changed;
    }
    if (this._series?.runId !== current.id) {
      this._series = new RunSeries(current.id);
      this._summary = null;
      changed = true;
    }
    const [grew, summary] = await Promise.all([
      pullMetrics(this._series),
      fetchSummary(current.id)
    ]);
    const summaryChanged = JSON.stringify(summary) !== JSON.stringify(this._summary);
    this._summary = summary;
    return grew || summaryChanged || changed;
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
