/**
 * Two or more runs in one tab: each run's curve (the mean over its ranks, step by step)
 * in the shared chart component, one colour and one legend entry per run, and no curve
 * across runs.
 */
import { Widget } from '@lumino/widgets';

import { ChartView } from './chart/view';
import { h, setText } from './dom';
import { fetchMetrics } from './request';
import { meanPerStep } from './runs';
import type { IRunModel, ISeqRecord } from './contracts';

async function allRecords(runId: string): Promise<ISeqRecord[]> {
  const out: ISeqRecord[] = [];
  let since = 0;
  for (;;) {
    const page = await fetchMetrics(runId, since);
    out.push(...page.records);
    since = page.last_seq;
    if (!page.more) {
      return out;
    }
  }
}

export class OverlayView extends Widget {
  readonly chart = new ChartView();
  readonly runs: IRunModel[];
  private readonly _status = h('div', 'dn-overlay-status');

  constructor(runs: IRunModel[], _interval: number) {
    super();
    this.runs = runs;
    this.addClass('dn-runview');
    this.addClass('dn-overlay');
    this.node.dataset.runIds = runs.map(r => r.id).join(',');
    this.chart.seriesName = key => this.runs[key]?.name ?? `run ${key}`;
    // One curve per run; a mean across runs (of different settings, lengths, even
    // metrics) means nothing, and there are no per-rank measures to show under it.
    this.chart.seriesNoun = 'run';
    this.chart.showMean = false;
    this.chart.setSummary(null);
    const names = h('div', 'dn-runview-summary', runs.map(r => r.name).join(' · '));
    this.node.append(names, this._status, this.chart.node);
    void this.load();
  }

  async load(): Promise<void> {
    setText(this._status, `Loading ${this.runs.length} runs…`);
    try {
      const pages = await Promise.all(this.runs.map(r => allRecords(r.id)));
      pages.forEach((records, key) => this.chart.addRecords(meanPerStep(records, key)));
      setText(this._status, 'Each curve: the mean over the run’s ranks, by step.');
      this.node.dataset.loaded = 'true';
    } catch (error) {
      setText(this._status, `Cannot load the runs: ${String(error)}`);
    }
  }
}
