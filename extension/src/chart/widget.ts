/**
 * The notebook cell's live view of a %%dist_train run, written against anywidget's
 * model interface (`get`, `on`, `off`, `send`), so one module draws it in every front end
 * that has anywidget (JupyterLab 4, Notebook 7, VS Code, Colab, marimo), with or without
 * this package's labextension. The entry anywidget loads is `./anywidget.ts`.
 *
 * The kernel (dist_notebook/display/live.py) sends only new records, batched, as
 * custom messages `{kind: "records", records, summary, clock, reset?}` (the traits and
 * messages are declared in dist_notebook/contracts.py, generated into ../contracts.ts);
 * a `LiveStore`, one per model, keeps them, so a view opened later (a reloaded page, a
 * second view of the output) draws the whole run. A new model says `{kind: "hello"}` and gets the whole
 * history with `reset`. The header's name, state and steps are synced traits. Stop sends
 * `{kind: "stop"}`. When the run ends the kernel sets the `final` trait (the static
 * picture and table as HTML): every view, a reloaded one included, shows it in place of
 * the chart, and the kernel also replaces the output it displayed by that picture.
 */
import type { IRecord, IRunSummary } from '../protocol';
import { LIVE_TRAITS } from '../contracts';
import type { ILiveTraits, IRecordsMessage, ViewMessage } from '../contracts';
import { h, setText } from '../dom';
import { toNumber } from './data';
import { ChartView, IDrawInfo } from './view';

/** Seconds without a record (at least 10 step times) before a rank shows no progress. */
const STALL_AFTER = 5;
/**
 * The part of anywidget's model (and of a Backbone widget model) the view uses: the
 * traits and messages of dist_notebook/contracts.py (LiveTraits, ViewMessage).
 */
export interface ILiveModel {
  get<K extends keyof ILiveTraits>(name: K): ILiveTraits[K] | undefined;
  on(event: string, callback: (...args: any[]) => void): void;
  off(event?: string | null, callback?: ((...args: any[]) => void) | null): void;
  send(content: ViewMessage): void;
}

declare global {
  interface Window {
    /** Set by a measuring page: every draw of a live view is logged here. */
    __dnLiveLog?: {
      at: number;
      latencies: number[];
      times: number[];
      points: number;
    }[];
    /** Set by a measuring page: every records message as it arrived (bench/live_view.py
     * splits report()-to-drawn into kernel, transit and browser parts with it). */
    __dnLiveRecv?: {
      at: number;
      clock: number;
      times: number[];
      reset: boolean;
    }[];
  }
}

/** A run's records as they came, shared by every view of one model. */
export class LiveStore {
  records: IRecord[] = [];
  summary: IRunSummary | null = null;
  /** The browser's clock minus the kernel's, from the last message. */
  skew = 0;
  private readonly _views = new Set<(msg: IRecordsMessage) => void>();
  private readonly _onMessage = (msg: unknown): void => this._receive(msg);

  constructor(readonly model: ILiveModel) {
    model.on('msg:custom', this._onMessage);
    // A model made from the kernel's state (a reloaded page) has no records yet.
    model.send({ kind: 'hello' });
  }

  listen(view: (msg: IRecordsMessage) => void): () => void {
    this._views.add(view);
    return () => this._views.delete(view);
  }

  dispose(): void {
    this.model.off('msg:custom', this._onMessage);
    this._views.clear();
  }

  private _receive(raw: unknown): void {
    const msg = raw as IRecordsMessage | null;
    if (msg === null || typeof msg !== 'object' || msg.kind !== 'records') {
      return;
    }
    if (msg.reset) {
      this.records = [];
    }
    this.records.push(...msg.records);
    this.summary = msg.summary ?? this.summary;
    this.skew = Date.now() / 1000 - msg.clock;
    window.__dnLiveRecv?.push({
      at: Date.now() / 1000,
      clock: msg.clock,
      times: msg.records.map(r => r.time),
      reset: msg.reset === true
    });
    for (const view of this._views) {
      view(msg);
    }
  }
}

/** One view of a live run: header, per-rank states, the chart; the final picture. */
export class LiveRunView {
  private readonly _chart = new ChartView();
  private readonly _title = h('span', 'dn-live-title');
  private readonly _state = h('span', 'dn-live-state');
  private readonly _progress = h('span', 'dn-live-progress');
  private readonly _ranks = h('div', 'dn-live-ranks');
  private readonly _final = h('div', 'dn-live-final');
  private readonly _headerRow = h('div', 'dn-live-header');
  private readonly _stop = h(
    'button',
    'dn-live-stop jp-mod-styled jp-mod-warn',
    'Stop'
  );
  private readonly _onChange = (): void => this._header();
  private readonly _unlisten: () => void;
  private _timer: number | null = null;

  constructor(
    readonly model: ILiveModel,
    readonly store: LiveStore,
    readonly el: HTMLElement
  ) {
    el.classList.add('dn-live');
    this._headerRow.append(this._title, this._state, this._progress, this._stop);
    this._final.hidden = true;
    el.append(this._headerRow, this._ranks, this._chart.node, this._final);
    this._stop.addEventListener('click', () => {
      this._stop.disabled = true;
      setText(this._stop, 'Stopping…');
      model.send({ kind: 'stop' });
    });
    this._chart.onDraw = info => this._log(info);
    this._chart.addRecords(store.records);
    this._chart.setSummary(store.summary);
    this._unlisten = store.listen(msg => {
      if (msg.reset) {
        this._chart.clear();
      }
      this._chart.addRecords(msg.records);
      this._chart.setSummary(store.summary);
      this._header();
    });
    for (const name of LIVE_TRAITS) {
      model.on(`change:${name}`, this._onChange);
    }
    this._header();
    this._timer = window.setInterval(() => this._header(), 1000);
  }

  dispose(): void {
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
    }
    for (const name of LIVE_TRAITS) {
      this.model.off(`change:${name}`, this._onChange);
    }
    this._unlisten();
    this._chart.dispose();
  }

  private _log(info: IDrawInfo): void {
    const log = window.__dnLiveLog;
    if (log !== undefined) {
      const now = Date.now() / 1000 - this.store.skew;
      log.push({
        at: Date.now() / 1000,
        latencies: info.recordTimes.map(t => now - t),
        times: info.recordTimes,
        points: info.points
      });
    }
  }

  /** The kernel's final picture (its own HTML: an image and a table), once set. */
  private _showFinal(html: string): void {
    if (this._final.dataset.html === html) {
      return;
    }
    this._final.dataset.html = html;
    // Written by the kernel from the run's own numbers (final.py escapes every text).
    this._final.innerHTML = html;
    this._final.hidden = false;
    // The picture has its own header line (name, state, time, steps, samples/s).
    this._headerRow.hidden = true;
    this._chart.node.hidden = true;
    this._ranks.hidden = true;
  }

  private _header(): void {
    const m = this.model;
    const state = String(m.get('state'));
    const final = String(m.get('final') ?? '');
    if (final) {
      this._showFinal(final);
    }
    const summary = this.store.summary;
    const now = Date.now() / 1000 - this.store.skew;
    const elapsed = Math.max(0, now - Number(m.get('started')));
    setText(this._title, String(m.get('name')));
    setText(this._state, state);
    this.el.dataset.state = state;
    const steps = m.get('steps') ?? null;
    const done = summary?.steps_done ?? null;
    const parts = final ? [] : [`${elapsed.toFixed(0)} s`];
    if (done !== null) {
      parts.push(steps ? `step ${done}/${steps}` : `step ${done}`);
      if (steps && done > 0 && done < steps && state === 'running') {
        parts.push(`ETA ${((elapsed * (steps - done)) / done).toFixed(0)} s`);
      }
    }
    const sps = toNumber(summary?.samples_per_s);
    if (sps !== null) {
      parts.push(`${Math.round(sps).toLocaleString('en-US')} samples/s`);
    }
    setText(this._progress, parts.join(' · '));
    this._stop.hidden = !m.get('stoppable') || state !== 'running';
    const rankStates = m.get('rank_states') ?? {};
    const text = Object.entries(rankStates).map(([rank, s]) => {
      const r = summary?.ranks.find(x => String(x.rank) === rank);
      const last = toNumber(r?.last_time);
      const stepTime = toNumber(r?.step_time) ?? 0;
      const silent = last === null ? elapsed : now - last;
      if (s === 'running' && silent > Math.max(STALL_AFTER, 10 * stepTime)) {
        return `rank ${rank}: no progress for ${silent.toFixed(0)} s`;
      }
      return `rank ${rank}: ${s}`;
    });
    setText(this._ranks, text.join(' · '));
  }
}
