/**
 * The side panel: clusters and their ranks, the current run's loss curve, the run
 * history. It renders a DistModel and sends user actions to commands.
 */
import { CommandRegistry } from '@lumino/commands';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { CommandIDs } from './commands';
import { CurveView } from './curve';
import { h, setText, syncChildren } from './dom';
import { DistModel } from './model';
import { formatBytes, formatNumber, IRankStats, stragglers } from './series';
import type { IClusterModel, IRankModel, IRunModel } from './types';

/** Cluster states in which there are no processes to act on. */
const ENDED = new Set(['stopped', 'failed']);

export function formatTime(seconds: number | null): string {
  return seconds === null ? '' : new Date(seconds * 1000).toLocaleTimeString();
}

export class DistPanel extends Widget {
  readonly model: DistModel;
  /** Fraction below the median samples/s that makes a straggler. */
  stragglerThreshold = 0.2;
  private readonly _commands: CommandRegistry;
  private readonly _error = h('div', 'dn-error');
  private readonly _clusters = h('div', 'dn-clusters');
  private readonly _noClusters = h(
    'div',
    'dn-empty',
    'No cluster yet. In a notebook: %load_ext dist_notebook, then %dist_cluster start.'
  );
  private readonly _runTitle = h('div', 'dn-current-run-title');
  private readonly _curve = new CurveView('loss', 'dn-run-curve');
  private readonly _current = h('section', 'dn-current-run');
  private readonly _runs = h('ul', 'dn-runs');

  constructor(options: DistPanel.IOptions) {
    super();
    this.model = options.model;
    this._commands = options.commands;
    this.addClass('dn-panel');
    this.node.dataset.testId = 'dist-notebook-panel';

    const header = h('header', 'dn-header');
    const refresh = h('button', 'jp-Button jp-mod-minimal dn-refresh-button', '⟳');
    refresh.title = 'Refresh now';
    refresh.addEventListener(
      'click',
      () => void this._commands.execute(CommandIDs.refresh)
    );
    header.append(h('h2', 'dn-title', 'Distributed training'), refresh);

    this._current.append(
      h('h3', 'dn-section-title', 'Current run'),
      this._runTitle,
      this._curve.node
    );
    const history = h('section', 'dn-history');
    history.append(h('h3', 'dn-section-title', 'Runs'), this._runs);
    const clusters = h('section', 'dn-clusters-section');
    clusters.append(
      h('h3', 'dn-section-title', 'Clusters'),
      this._noClusters,
      this._clusters
    );
    this.node.append(header, this._error, clusters, this._current, history);

    this.model.changed.connect(this.update, this);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.update();
  }

  protected onUpdateRequest(msg: Message): void {
    super.onUpdateRequest(msg);
    if (!this.isVisible) {
      return; // drawn on show
    }
    const model = this.model;
    setText(this._error, model.error ? `Cannot reach the server: ${model.error}` : '');
    this._error.hidden = !model.error;

    const run = model.currentRun;
    const stats = model.series?.allStats() ?? [];
    const slow = stragglers(stats, this.stragglerThreshold);
    this._renderClusters(run, stats, slow);
    this._renderCurrent(run, slow);
    this._renderRuns(run);
  }

  private _renderClusters(
    run: IRunModel | null,
    stats: IRankStats[],
    slow: Set<number>
  ): void {
    const clusters = this.model.clusters;
    this._noClusters.hidden = clusters.length > 0;
    syncChildren(
      this._clusters,
      clusters,
      c => c.id,
      c => this._createCluster(c),
      (node, c) => {
        const own = run !== null && run.cluster_id === c.id;
        this._updateCluster(node, c, own ? stats : [], own ? slow : new Set());
      }
    );
  }

  private _createCluster(cluster: IClusterModel): HTMLElement {
    const node = h('div', 'dn-cluster');
    node.dataset.clusterId = cluster.id;
    const header = h('div', 'dn-cluster-header');
    const interrupt = h(
      'button',
      'jp-Button jp-mod-styled jp-mod-reject dn-interrupt-button',
      'Interrupt'
    );
    interrupt.title = 'Interrupt the running cell on every rank (KeyboardInterrupt)';
    interrupt.addEventListener('click', () =>
      this._commands.execute(CommandIDs.interruptCluster, { clusterId: cluster.id })
    );
    const stop = h(
      'button',
      'jp-Button jp-mod-styled jp-mod-warn dn-stop-button',
      'Stop'
    );
    stop.title = 'Stop the engines and the controller of this cluster';
    stop.addEventListener('click', () =>
      this._commands.execute(CommandIDs.stopCluster, { clusterId: cluster.id })
    );
    const buttons = h('span', 'dn-cluster-buttons');
    buttons.append(interrupt, stop);
    header.append(
      h('span', 'dn-cluster-id', cluster.id),
      h('span', 'dn-cluster-state'),
      h('span', 'dn-cluster-backend'),
      buttons
    );
    const table = h('table', 'dn-ranks');
    const head = h('thead', '');
    const row = h('tr', '');
    for (const title of ['', 'rank', 'device', 'step', 'samples/s', 'GPU mem']) {
      row.append(h('th', '', title));
    }
    head.append(row);
    table.append(head, h('tbody', 'dn-ranks-body'));
    node.append(header, table);
    return node;
  }

  private _updateCluster(
    node: HTMLElement,
    cluster: IClusterModel,
    stats: IRankStats[],
    slow: Set<number>
  ): void {
    node.dataset.state = cluster.state;
    const state = node.querySelector('.dn-cluster-state')!;
    setText(state, cluster.state);
    state.setAttribute('data-state', cluster.state);
    const backend = [
      cluster.backend,
      `${cluster.ranks.length || cluster.n} ranks`,
      formatTime(cluster.started)
    ];
    setText(
      node.querySelector('.dn-cluster-backend')!,
      backend.filter(Boolean).join(' · ')
    );
    const ended = ENDED.has(cluster.state);
    node.querySelector<HTMLButtonElement>('.dn-interrupt-button')!.disabled = ended;
    node.querySelector<HTMLButtonElement>('.dn-stop-button')!.disabled = ended;
    const byRank = new Map(stats.map(s => [s.rank, s]));
    syncChildren(
      node.querySelector('.dn-ranks-body')!,
      cluster.ranks,
      r => String(r.rank),
      r => createRank(r),
      (row, r) => updateRank(row, r, byRank.get(r.rank) ?? null, slow.has(r.rank))
    );
  }

  private _renderCurrent(run: IRunModel | null, slow: Set<number>): void {
    this._current.hidden = run === null;
    if (run === null) {
      return;
    }
    this._current.dataset.runId = run.id;
    const steps = this.model.series
      ?.allStats()
      .reduce((m, s) => Math.max(m, s.step ?? 0), 0);
    const progress = run.steps ? ` · step ${steps ?? 0}/${run.steps}` : '';
    setText(this._runTitle, `${run.name} · ${run.state}${progress}`);
    this._runTitle.dataset.state = run.state;
    this._curve.update(this.model.series, slow);
  }

  private _renderRuns(current: IRunModel | null): void {
    syncChildren(
      this._runs,
      this.model.runs,
      r => r.id,
      r => {
        const item = h('li', 'dn-run-item');
        item.dataset.runId = r.id;
        item.tabIndex = 0;
        item.title = 'Open the curves of this run';
        const open = () => this._commands.execute(CommandIDs.openRun, { runId: r.id });
        item.addEventListener('click', open);
        item.addEventListener('keydown', e => {
          if (e.key === 'Enter') {
            void open();
          }
        });
        item.append(
          h('span', 'dn-run-name'),
          h('span', 'dn-run-state'),
          h('span', 'dn-run-time')
        );
        return item;
      },
      (item, r) => {
        item.dataset.state = r.state;
        item.classList.toggle('dn-mod-current', r.id === current?.id);
        setText(item.querySelector('.dn-run-name')!, r.name);
        setText(item.querySelector('.dn-run-state')!, r.state);
        setText(item.querySelector('.dn-run-time')!, formatTime(r.started));
      }
    );
  }
}

function createRank(rank: IRankModel): HTMLTableRowElement {
  const row = h('tr', 'dn-rank');
  row.dataset.rank = String(rank.rank);
  const light = h('span', 'dn-light');
  const cell = h('td', 'dn-rank-light');
  cell.append(light);
  row.append(
    cell,
    h('td', 'dn-rank-id', String(rank.rank)),
    h('td', 'dn-rank-device'),
    h('td', 'dn-rank-step'),
    h('td', 'dn-rank-sps'),
    h('td', 'dn-rank-gpu')
  );
  return row;
}

function updateRank(
  row: HTMLTableRowElement,
  rank: IRankModel,
  stats: IRankStats | null,
  straggler: boolean
): void {
  row.dataset.state = rank.state;
  row.classList.toggle('dn-straggler', straggler);
  row.title = `rank ${rank.rank}: ${rank.state}${rank.host ? ` on ${rank.host}` : ''}${
    rank.pid ? `, pid ${rank.pid}` : ''
  }${straggler ? ' (straggler: samples/s well below the median)' : ''}`;
  setText(row.querySelector('.dn-rank-device')!, rank.device ?? '');
  setText(
    row.querySelector('.dn-rank-step')!,
    stats?.step === null || !stats ? '–' : String(stats.step)
  );
  setText(row.querySelector('.dn-rank-sps')!, formatNumber(stats?.samplesPerS ?? null));
  setText(row.querySelector('.dn-rank-gpu')!, formatBytes(stats?.gpuMem ?? null));
}

export namespace DistPanel {
  export interface IOptions {
    model: DistModel;
    commands: CommandRegistry;
  }
}
