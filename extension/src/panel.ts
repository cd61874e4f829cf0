/**
 * The side panel, in the order a user looks: live clusters with their ranks and
 * actions, the current run's curve, the runs (searchable, filterable, selectable), and
 * the stopped clusters folded into a history without buttons. It renders a DistModel
 * and sends user actions to commands.
 */
import { CommandRegistry } from '@lumino/commands';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { CommandIDs } from './commands';
import { formatNumber } from './chart/data';
import { ChartView } from './chart/view';
import { h, setText, syncChildren } from './dom';
import { DistModel, isActive } from './model';
import {
  BY_NODE_BEYOND,
  INodeGroup,
  nodeGroups,
  nodeKey,
  nodeLabels,
  rankSet
} from './nodes';
import type { IRankSummary, IRunSummary } from './protocol';
import { formatBytes } from './series';
import { formatWhen, RunList } from './runlist';
import { NO_SERVER_EXTENSION } from './request';
import type { IClusterModel, IRankModel, IRunModel } from './contracts';

/** A span of seconds as the magics write it: 90 s, 30 min, 2 h. */
export function formatDuration(seconds: number): string {
  if (seconds < 90) {
    return `${Math.round(seconds)} s`;
  }
  if (seconds < 5400) {
    return `${Math.round(seconds / 60)} min`;
  }
  return `${(seconds / 3600).toFixed(1)} h`;
}

export function formatTime(seconds: number | null): string {
  return seconds === null ? '' : new Date(seconds * 1000).toLocaleTimeString();
}

export class DistPanel extends Widget {
  readonly model: DistModel;
  private readonly _commands: CommandRegistry;
  private readonly _error = h('div', 'dn-error');
  private readonly _clusters = h('div', 'dn-clusters');
  /** Until the server's first answer: "Loading…", never "No cluster yet" (it may not be). */
  private readonly _noClusters = h('div', 'dn-empty', 'Loading…');
  private readonly _runTitle = h('div', 'dn-current-run-title');
  private readonly _currentTitle = h('h3', 'dn-section-title', 'Current run');
  /** The current run's chart: the same component as the cell's live view and run tab. */
  private readonly _chart = new ChartView();
  private _chartRun = '';
  private _fed = 0;
  private readonly _current = h('section', 'dn-current-run');
  private readonly _runs: RunList;
  private readonly _history = h('details', 'dn-cluster-history');
  private readonly _historySummary = h('summary', 'dn-cluster-history-title');
  private readonly _ended = h('ul', 'dn-ended-clusters');
  /** Beyond BY_NODE_BEYOND ranks: the nodes opened to their ranks, per cluster. */
  private readonly _expanded = new Map<string, Set<string>>();
  /** When the first answer of the server was drawn (ms, performance.now()). */
  firstRender: number | null = null;

  constructor(options: DistPanel.IOptions) {
    super();
    this.model = options.model;
    this._commands = options.commands;
    this._runs = new RunList(options.commands);
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

    this._current.append(this._currentTitle, this._runTitle, this._chart.node);
    const clusters = h('section', 'dn-clusters-section');
    clusters.append(
      h('h3', 'dn-section-title', 'Clusters'),
      this._noClusters,
      this._clusters
    );
    this._history.append(this._historySummary, this._ended);
    this.node.append(
      header,
      this._error,
      clusters,
      this._current,
      this._runs.node,
      this._history
    );

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
    setText(
      this._error,
      !model.error
        ? ''
        : model.error === NO_SERVER_EXTENSION
          ? model.error
          : `Cannot reach the server: ${model.error}`
    );
    this._error.hidden = !model.error;

    this.node.dataset.loaded = String(model.loaded);
    const run = model.currentRun;
    this._renderClusters();
    this._renderCurrent(run, run === null ? null : model.summaryOf(run.id));
    // Before the first answer the lists would say "0 runs": nothing is shown instead.
    this._runs.node.hidden = !model.loaded;
    this._runs.render(model.runs, run);
    this._renderHistory();
    if (this.firstRender === null && model.loaded) {
      this.firstRender = performance.now();
      this.node.dataset.firstRenderMs = String(Math.round(this.firstRender));
    }
  }

  private _renderClusters(): void {
    const model = this.model;
    const clusters = model.liveClusters;
    this._noClusters.hidden = clusters.length > 0 || (!model.loaded && !!model.error);
    setText(
      this._noClusters,
      !model.loaded
        ? 'Loading…'
        : model.clusters.length
          ? 'No live cluster: %dist_cluster start in a notebook. Stopped ones are in the history below.'
          : 'No cluster yet. In a notebook: %load_ext dist_notebook, then %dist_cluster start.'
    );
    syncChildren(
      this._clusters,
      clusters,
      c => c.id,
      c => this._createCluster(c),
      (node, c) => this._updateCluster(node, c)
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
    interrupt.title =
      "Interrupt through the cluster's kernel: a training run is cancelled, the cluster stays";
    interrupt.addEventListener('click', () =>
      this._commands.execute(CommandIDs.interruptCluster, { clusterId: cluster.id })
    );
    const stop = h(
      'button',
      'jp-Button jp-mod-styled jp-mod-warn dn-stop-button',
      'Stop'
    );
    stop.title =
      "Stop through the cluster's kernel, as %dist_cluster stop there: the run is cancelled";
    stop.addEventListener('click', () =>
      this._commands.execute(CommandIDs.stopCluster, { clusterId: cluster.id })
    );
    const buttons = h('span', 'dn-cluster-buttons');
    buttons.append(interrupt, stop);
    const busy = h('span', 'dn-cluster-busy', 'busy');
    busy.title = 'A run holds the ranks';
    const detached = h('span', 'dn-cluster-detached', 'detached');
    header.append(
      h('span', 'dn-cluster-id', cluster.id),
      h('span', 'dn-cluster-state'),
      busy,
      detached,
      h('span', 'dn-cluster-backend'),
      buttons
    );
    const activity = h('div', 'dn-cluster-activity');
    const table = h('table', 'dn-ranks');
    const head = h('thead', '');
    const row = h('tr', '');
    const titles: [string, string][] = [
      ['', ''],
      ['rank', ''],
      ['node', 'the node (host) the ranks below run on'],
      ['device', ''],
      ['step', "steps this rank has done in the run going (as in the run's heading)"],
      ['samples/s', 'samples per second over the last steps of the run going'],
      ['GPU', 'GPU memory in use']
    ];
    const classes: { [title: string]: string } = {
      node: 'dn-rank-node',
      step: 'dn-rank-step',
      'samples/s': 'dn-rank-sps',
      GPU: 'dn-rank-gpu'
    };
    for (const [title, tip] of titles) {
      const cls = classes[title] ?? '';
      const th = h('th', cls, title);
      th.title = tip;
      row.append(th);
    }
    head.append(row);
    table.append(head, h('tbody', 'dn-ranks-body'));
    node.append(header, activity, table);
    return node;
  }

  private _updateCluster(node: HTMLElement, cluster: IClusterModel): void {
    // The figures of a run still going on this cluster; an idle cluster shows none (its
    // last run is named as such, with when it ended).
    const run = this.model.activeRunOf(cluster.id);
    const summary = run === null ? null : this.model.summaryOf(run.id);
    const stats = summary?.ranks ?? [];
    const slow = new Set(stats.filter(s => s.straggler).map(s => s.rank));
    node.dataset.state = cluster.state;
    node.dataset.busy = String(run !== null);
    node.querySelector<HTMLElement>('.dn-cluster-busy')!.hidden = run === null;
    const detached = node.querySelector<HTMLElement>('.dn-cluster-detached')!;
    detached.hidden = !cluster.detached;
    if (cluster.detached) {
      const idle = cluster.detached.idle_timeout;
      detached.textContent =
        idle === null
          ? 'detached'
          : `detached · stops after ${formatDuration(idle)} unused`;
      detached.title =
        `Outlives its kernels (keeper pid ${cluster.detached.keeper}): ` +
        '%dist_cluster attach ' +
        cluster.id +
        ' from any kernel; Stop ends it';
    }
    this._renderActivity(node.querySelector('.dn-cluster-activity')!, cluster, run);
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
    const busy = cluster.state === 'stopping' || cluster.state === 'new';
    // A read-only cluster (another user's store or files): greyed, its reason as the tip.
    const readOnly = cluster.read_only ?? null;
    for (const name of ['.dn-interrupt-button', '.dn-stop-button']) {
      const button = node.querySelector<HTMLButtonElement>(name)!;
      button.disabled = busy || readOnly !== null;
      if (readOnly !== null) {
        button.title = `Read-only: ${readOnly}`;
      }
    }
    const byRank = new Map(stats.map(s => [s.rank, s]));
    // Ranks come in node order: each node's first row names it.
    const labels = nodeLabels(cluster.ranks);
    // On one node the column says nothing: hidden, as in %dist_cluster status.
    const oneNode = new Set(cluster.ranks.map(nodeKey)).size <= 1;
    const ranksTable = node.querySelector('.dn-ranks')!;
    ranksTable.classList.toggle('dn-one-node', oneNode);
    ranksTable.classList.toggle('dn-idle', run === null);
    // CPU ranks have no GPU figures: the column is hidden, not a row of dashes.
    const gpus = cluster.ranks.some(r => (r.device ?? '').startsWith('cuda'));
    ranksTable.classList.toggle('dn-no-gpu', !gpus);
    const nodeOf = new Map(cluster.ranks.map((r, i) => [r.rank, labels[i]]));
    const rows = this._rows(cluster, stats);
    ranksTable.classList.toggle(
      'dn-by-node',
      rows.some(r => r.group !== null)
    );
    syncChildren(
      node.querySelector('.dn-ranks-body')!,
      rows,
      r => (r.group ? `node-${r.group.key}` : String(r.rank!.rank)),
      r => (r.group ? this._createNode(cluster.id, r.group.key) : createRank(r.rank!)),
      (row, r) => {
        if (r.group) {
          updateNode(row, r.group, this._isOpen(cluster.id, r.group.key));
          return;
        }
        const rank = r.rank!;
        updateRank(row, rank, byRank.get(rank.rank) ?? null, slow.has(rank.rank));
        const label = r.inNode ? '' : (nodeOf.get(rank.rank) ?? '');
        setText(row.querySelector('.dn-rank-node')!, label);
        row.dataset.node = nodeKey(rank);
        row.classList.toggle('dn-node-first', label !== '');
        row.classList.toggle('dn-in-node', r.inNode);
      }
    );
  }

  /**
   * The card's rows: a row per rank up to BY_NODE_BEYOND ranks; beyond, a row per node
   * (rank range, state counts, the run's slowest rank), each opened to its ranks on a
   * click, as `%dist_cluster status` is by node beyond 8 ranks.
   */
  private _rows(cluster: IClusterModel, stats: readonly IRankSummary[]): ICardRow[] {
    if (cluster.ranks.length <= BY_NODE_BEYOND) {
      return cluster.ranks.map(rank => ({ group: null, rank, inNode: false }));
    }
    const out: ICardRow[] = [];
    const byRank = new Map(cluster.ranks.map(r => [r.rank, r]));
    for (const group of nodeGroups(cluster.ranks, stats)) {
      out.push({ group, rank: null, inNode: false });
      if (this._isOpen(cluster.id, group.key)) {
        for (const r of group.ranks) {
          out.push({ group: null, rank: byRank.get(r)!, inNode: true });
        }
      }
    }
    return out;
  }

  private _isOpen(clusterId: string, key: string): boolean {
    return this._expanded.get(clusterId)?.has(key) ?? false;
  }

  private _createNode(clusterId: string, key: string): HTMLTableRowElement {
    const row = h('tr', 'dn-node-row');
    const light = h('td', 'dn-rank-light');
    light.append(h('span', 'dn-light'));
    const cell = h('td', 'dn-node-cell');
    cell.colSpan = 6;
    cell.append(
      h('span', 'dn-node-toggle'),
      h('span', 'dn-node-label'),
      h('span', 'dn-node-ranks'),
      h('span', 'dn-node-states'),
      h('span', 'dn-node-slowest')
    );
    row.append(light, cell);
    row.title = 'click to show or hide the ranks of this node';
    row.addEventListener('click', () => {
      const open = this._expanded.get(clusterId) ?? new Set<string>();
      if (!open.delete(key)) {
        open.add(key);
      }
      this._expanded.set(clusterId, open);
      this.update();
    });
    return row;
  }

  /** What the cluster does: the run going with its progress, else its last run. */
  private _renderActivity(
    line: HTMLElement,
    cluster: IClusterModel,
    active: IRunModel | null
  ): void {
    const run = active ?? this.model.lastRunOf(cluster.id);
    line.dataset.runId = run?.id ?? '';
    line.dataset.kind = active ? 'active' : run ? 'last' : 'none';
    if (run === null) {
      setText(line, 'idle · no run yet');
      return;
    }
    const summary = this.model.summaryOf(run.id);
    const progress = stepText(run, summary);
    if (active) {
      setText(
        line,
        `run ${run.name} · ${run.state}${progress ? ` · ${progress}` : ''}`
      );
      return;
    }
    const when = run.ended ? ` at ${formatWhen(run.ended)}` : '';
    setText(
      line,
      `idle · last run ${run.name}: ${run.state}${when}${progress ? ` · ${progress}` : ''}`
    );
  }

  private _renderCurrent(run: IRunModel | null, summary: IRunSummary | null): void {
    this._current.hidden = run === null;
    if (run === null) {
      return;
    }
    this._current.dataset.runId = run.id;
    // A run that ended is the last run, not a current one (its rates are not now's).
    setText(this._currentTitle, isActive(run) ? 'Current run' : 'Last run');
    // The same words as the cluster card's: one summary, one step.
    const progress = stepText(run, summary);
    setText(
      this._runTitle,
      `${run.name} · ${run.state}${progress ? ` · ${progress}` : ''}`
    );
    this._runTitle.dataset.state = run.state;
    this._runTitle.dataset.steps = String(summary?.steps_done ?? '');
    this._runTitle.title =
      'step: the steps every rank has done (the slowest rank’s); each rank’s own count is in its row';
    // A new current run may show before its series is made: never feed another run's.
    const series = this.model.series?.runId === run.id ? this.model.series : null;
    if (series === null || this._chartRun !== run.id) {
      this._chart.clear();
      this._chartRun = run.id;
      this._fed = 0;
    }
    if (series !== null) {
      this._chart.addRecords(series.records.slice(this._fed));
      this._fed = series.records.length;
    }
    this._chart.setSummary(summary);
  }

  /** Stopped, failed and orphaned clusters: one line each, folded, no buttons. */
  private _renderHistory(): void {
    const ended = this.model.endedClusters;
    this._history.hidden = ended.length === 0;
    setText(this._historySummary, `History: ${ended.length} stopped clusters`);
    syncChildren(
      this._ended,
      ended,
      c => c.id,
      c => {
        const item = h('li', 'dn-ended-cluster');
        item.dataset.clusterId = c.id;
        return item;
      },
      (item, c) => {
        item.dataset.state = c.state;
        const parts = [
          c.id,
          c.state,
          c.backend,
          `${c.ranks.length || c.n} ranks`,
          formatWhen(c.started)
        ];
        setText(item, parts.filter(Boolean).join(' · '));
      }
    );
  }
}

/**
 * "step 198/3000": the steps every rank has done (the slowest rank's, from the server's
 * summary), of the steps asked for; '' before the summary is in.
 */
export function stepText(run: IRunModel, summary: IRunSummary | null): string {
  if (summary === null || summary.run_id !== run.id) {
    return '';
  }
  const done = summary.steps_done ?? 0;
  return run.steps ? `step ${done}/${run.steps}` : `step ${done}`;
}

/** A row of a cluster card: a node (beyond BY_NODE_BEYOND ranks) or a rank. */
interface ICardRow {
  group: INodeGroup | null;
  rank: IRankModel | null;
  /** A rank shown under its opened node's row. */
  inNode: boolean;
}

/** The state a node's light shows: its rarest (what needs a look), as the text leads. */
function nodeState(group: INodeGroup): string {
  return group.states.split(', ')[0]?.split(' ')[1] ?? '';
}

function updateNode(row: HTMLElement, group: INodeGroup, open: boolean): void {
  row.dataset.node = group.key;
  row.dataset.open = String(open);
  row.dataset.slowest = group.slowest === null ? '' : String(group.slowest);
  row.classList.toggle('dn-straggler', group.straggler);
  row.querySelector('.dn-light')!.setAttribute('data-state', nodeState(group));
  const [toggle, label, ranks, states, slowest] = Array.from(
    row.querySelector('.dn-node-cell')!.children
  ) as HTMLElement[];
  setText(toggle, open ? '▾' : '▸');
  setText(label, group.label);
  setText(ranks, `ranks ${rankSet(group.ranks)}`);
  setText(states, group.states);
  setText(
    slowest,
    group.slowest === null
      ? ''
      : `slowest rank ${group.slowest}${group.straggler ? ' (straggler)' : ''}`
  );
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
    h('td', 'dn-rank-node'),
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
  stats: IRankSummary | null,
  straggler: boolean
): void {
  row.dataset.state = rank.state;
  row.classList.toggle('dn-straggler', straggler);
  const node =
    rank.node_rank !== undefined && rank.node_rank !== null
      ? ` (node ${rank.node_rank})`
      : '';
  row.title = `rank ${rank.rank}: ${rank.state}${rank.host ? ` on ${rank.host}${node}` : ''}${
    rank.pid ? `, pid ${rank.pid}` : ''
  }${straggler ? ' (straggler: the others wait for it in most steps)' : ''}`;
  setText(row.querySelector('.dn-rank-device')!, rank.device ?? '');
  // Steps done, as the run's heading counts them (a rank that reported step 197 of
  // steps numbered from 0 has done 198).
  setText(
    row.querySelector('.dn-rank-step')!,
    stats?.steps_done == null ? '–' : String(stats.steps_done)
  );
  setText(
    row.querySelector('.dn-rank-sps')!,
    formatNumber(finite(stats?.samples_per_s))
  );
  setText(row.querySelector('.dn-rank-gpu')!, formatBytes(finite(stats?.gpu_mem)));
}

/** A JSON float as a number to print; "nan"/"inf" and missing ones print as a dash. */
function finite(value: number | string | null | undefined): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

export namespace DistPanel {
  export interface IOptions {
    model: DistModel;
    commands: CommandRegistry;
  }
}
