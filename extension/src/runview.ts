/**
 * A main-area view of one run: its state, the flags it was started with, its code, each
 * rank's result and last output lines, and its curves in the shared chart component.
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { ChartView } from './chart/view';
import { h, setText } from './dom';
import { RunModel } from './model';
import { formatTime } from './panel';
import type { IRunSummary } from './protocol';
import { requestAPI } from './request';
import { RunDetails } from './rundetails';
import type { IExportModel } from './contracts';

export class RunView extends Widget {
  readonly model: RunModel;
  private readonly _summary = h('div', 'dn-runview-summary');
  private readonly _error = h('pre', 'dn-runview-error');
  private readonly _exports = h('div', 'dn-runview-exports');
  private _exportsShown = '';
  private readonly _curves = h('div', 'dn-runview-curves');
  private readonly _details = new RunDetails();
  /** The run chart, the same component as the notebook cell's live view. */
  readonly chart = new ChartView();
  private _fed = 0;

  constructor(model: RunModel) {
    super();
    this.model = model;
    this.addClass('dn-runview');
    this.node.dataset.runId = model.runId;
    this._curves.append(this.chart.node);
    this.node.append(
      this._summary,
      this._exports,
      this._error,
      this._curves,
      this._details.node
    );
    this.model.changed.connect(this.update, this);
  }

  get runId(): string {
    return this.model.runId;
  }

  dispose(): void {
    if (!this.isDisposed) {
      this.model.dispose();
      super.dispose();
    }
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.update();
  }

  protected onUpdateRequest(msg: Message): void {
    super.onUpdateRequest(msg);
    const run = this.model.run;
    const series = this.model.series;
    if (this.model.error) {
      setText(this._summary, `Cannot load run ${this.runId}: ${this.model.error}`);
    } else if (run) {
      const parts = [
        run.name,
        run.state,
        `cluster ${run.cluster_id}`,
        `started ${formatTime(run.started)}`,
        run.ended ? `ended ${formatTime(run.ended)}` : '',
        run.steps ? `${run.steps} steps` : ''
      ];
      setText(this._summary, parts.filter(Boolean).join(' · '));
      this.node.dataset.state = run.state;
    }
    this._showExports(run?.exports ?? []);
    setText(this._error, run?.error ?? '');
    this._error.hidden = !run?.error;
    this.chart.addRecords(series.records.slice(this._fed));
    this._fed = series.records.length;
    // The measures are the server's (GET runs/<id>/summary): drawn, never recomputed.
    requestAPI<IRunSummary>(`runs/${encodeURIComponent(this.runId)}/summary`).then(
      summary => {
        this.chart.setSummary(summary);
        if (run) {
          this._details.render(run, summary);
        }
      },
      () => undefined // no summary yet: the curves alone; the next poll tries again
    );
  }

  /** A line per export: a link where the tool serves one, else its place and command. */
  private _showExports(exports: IExportModel[]): void {
    const key = JSON.stringify(exports);
    if (key === this._exportsShown) {
      return;
    }
    this._exportsShown = key;
    this._exports.replaceChildren(
      ...exports.map(e => {
        const line = h('div', 'dn-runview-export');
        line.dataset.tool = e.tool;
        line.append(
          h('span', 'dn-runview-export-tool', `${TOOL_NAMES[e.tool] ?? e.tool}: `)
        );
        if (e.url) {
          const link = h('a', 'dn-runview-export-link', e.location);
          link.href = e.url;
          link.target = '_blank';
          link.rel = 'noopener noreferrer';
          line.append(link);
        } else {
          line.append(h('code', 'dn-runview-export-location', e.location));
        }
        if (e.command) {
          line.append(' · ', h('code', 'dn-runview-export-command', e.command));
        }
        return line;
      })
    );
    this._exports.hidden = exports.length === 0;
  }
}

const TOOL_NAMES: { [tool: string]: string } = {
  tensorboard: 'TensorBoard',
  mlflow: 'MLflow'
};
