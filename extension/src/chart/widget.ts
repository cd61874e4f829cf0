/**
 * The notebook cell's live view of a %%dist_train run: an ipywidgets model and view
 * registered by this labextension (module "dist-notebook"), drawing with ChartView.
 *
 * The kernel (dist_notebook/display/live.py) sends only new records, batched, as
 * custom messages `{kind: "records", records, summary, clock, reset?}`; the model keeps
 * them, so a view opened later (another view of the output) draws the whole run. The
 * header's name, state and steps are synced traits. Stop sends `{kind: "stop"}`. When the
 * run ends the kernel replaces this output by a static picture and closes the model.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import {
  DOMWidgetModel,
  DOMWidgetView,
  IJupyterWidgetRegistry
} from '@jupyter-widgets/base';

import type { ObjectHash } from 'backbone';

import type { IRecord, IRunSummary } from '../protocol';
import { h, setText } from '../dom';
import { toNumber } from './data';
import { ChartView, IDrawInfo } from './view';

export const MODULE_NAME = 'dist-notebook';
export const MODULE_VERSION = '0.1.0';
/** Seconds without a record (at least 10 step times) before a rank shows no progress. */
const STALL_AFTER = 5;

interface IRecordsMessage {
  kind: 'records';
  records: IRecord[];
  summary: IRunSummary | null;
  clock: number;
  reset?: boolean;
}

declare global {
  interface Window {
    /** Set by a measuring page: every draw of a live view is logged here. */
    __dnLiveLog?: { at: number; latencies: number[]; points: number }[];
  }
}

export class LiveRunModel extends DOMWidgetModel {
  records: IRecord[] = [];
  summary: IRunSummary | null = null;
  /** The browser's clock minus the kernel's, from the last message. */
  skew = 0;

  defaults(): ObjectHash {
    return {
      ...super.defaults(),
      _model_name: 'LiveRunModel',
      _model_module: MODULE_NAME,
      _model_module_version: MODULE_VERSION,
      _view_name: 'LiveRunView',
      _view_module: MODULE_NAME,
      _view_module_version: MODULE_VERSION,
      name: '',
      run_id: '',
      state: 'pending',
      steps: null,
      started: 0,
      rank_states: {},
      stoppable: true
    };
  }

  initialize(attributes: ObjectHash, options: any): void {
    super.initialize(attributes, options);
    this.on('msg:custom', (content: IRecordsMessage) => this._receive(content));
    // A model made from the kernel's state (a reloaded page) has no records yet.
    this.send({ kind: 'hello' });
  }

  private _receive(msg: IRecordsMessage): void {
    if (msg.kind !== 'records') {
      return;
    }
    if (msg.reset) {
      this.records = [];
    }
    this.records.push(...msg.records);
    this.summary = msg.summary ?? this.summary;
    this.skew = Date.now() / 1000 - msg.clock;
    this.trigger('dn:records', msg);
  }
}

export class LiveRunView extends DOMWidgetView {
  declare model: LiveRunModel;
  private readonly _chart = new ChartView();
  private readonly _title = h('span', 'dn-live-title');
  private readonly _state = h('span', 'dn-live-state');
  private readonly _progress = h('span', 'dn-live-progress');
  private readonly _ranks = h('div', 'dn-live-ranks');
  private readonly _stop = h(
    'button',
    'dn-live-stop jp-mod-styled jp-mod-warn',
    'Stop'
  );
  private _timer: number | null = null;

  render(): void {
    this.el.classList.add('dn-live');
    const header = h('div', 'dn-live-header');
    header.append(this._title, this._state, this._progress, this._stop);
    this.el.append(header, this._ranks, this._chart.node);
    this._stop.addEventListener('click', () => {
      this._stop.disabled = true;
      setText(this._stop, 'Stopping…');
      this.model.send({ kind: 'stop' });
    });
    this._chart.onDraw = info => this._log(info);
    this._chart.addRecords(this.model.records);
    this._chart.setSummary(this.model.summary);
    this.listenTo(this.model, 'dn:records', (msg: IRecordsMessage) => {
      if (msg.reset) {
        this._chart.clear();
      }
      this._chart.addRecords(msg.records);
      this._chart.setSummary(this.model.summary);
      this._header();
    });
    this.listenTo(this.model, 'change', () => this._header());
    this._header();
    this._timer = window.setInterval(() => this._header(), 1000);
  }

  remove(): this {
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
    }
    return super.remove();
  }

  private _log(info: IDrawInfo): void {
    const log = window.__dnLiveLog;
    if (log !== undefined) {
      const now = Date.now() / 1000 - this.model.skew;
      log.push({
        at: Date.now() / 1000,
        latencies: info.recordTimes.map(t => now - t),
        points: info.points
      });
    }
  }

  private _header(): void {
    const m = this.model;
    const state = String(m.get('state'));
    const summary = m.summary;
    const now = Date.now() / 1000 - m.skew;
    const elapsed = Math.max(0, now - Number(m.get('started')));
    setText(this._title, String(m.get('name')));
    setText(this._state, state);
    this.el.dataset.state = state;
    const steps = m.get('steps') as number | null;
    const done = summary?.steps_done ?? null;
    const parts = [`${elapsed.toFixed(0)} s`];
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
    const rankStates = (m.get('rank_states') ?? {}) as { [rank: string]: string };
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

/** Registers the live view with the notebook's widget manager. */
export const liveRunPlugin: JupyterFrontEndPlugin<void> = {
  id: 'dist-notebook:live-run',
  description: "The %%dist_train cell's live chart (an ipywidgets view).",
  autoStart: true,
  requires: [IJupyterWidgetRegistry],
  activate: (_app: JupyterFrontEnd, registry: IJupyterWidgetRegistry) => {
    registry.registerWidget({
      name: MODULE_NAME,
      version: MODULE_VERSION,
      exports: { LiveRunModel, LiveRunView }
    });
  }
};
