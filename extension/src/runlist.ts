/**
 * The panel's run history: searchable and filterable (name, state, cluster, date), with
 * runs selected by their checkboxes for an overlay of their curves or for deletion,
 * and a prune of everything before a date. It renders the model's runs and sends the
 * user's actions to commands; it fetches nothing itself.
 */
import { CommandRegistry } from '@lumino/commands';

import { CommandIDs } from './commands';
import { h, setText, syncChildren } from './dom';
import { filterRuns, IRunFilter } from './runs';
import type { IRunModel } from './contracts';
import type { RunState } from './protocol';

const STATES: RunState[] = [
  'pending',
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'orphaned'
];
/** Rows drawn at most: months of runs stay quick; the filters reach the rest. */
export const MAX_ROWS = 100;

export function formatWhen(seconds: number | null): string {
  if (seconds === null) {
    return '';
  }
  const d = new Date(seconds * 1000);
  const time = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  if (new Date().toDateString() === d.toDateString()) {
    return time;
  }
  const sameYear = new Date().getFullYear() === d.getFullYear();
  const day = d.toLocaleDateString([], {
    month: 'short',
    day: 'numeric',
    ...(sameYear ? {} : { year: 'numeric' })
  });
  return `${day} ${time}`;
}

function select(className: string, title: string): HTMLSelectElement {
  const node = h('select', `jp-mod-styled ${className}`);
  node.title = title;
  return node;
}

function option(value: string, label: string): HTMLOptionElement {
  const node = h('option', '', label);
  node.value = value;
  return node;
}

export class RunList {
  readonly node = h('section', 'dn-history');
  readonly selected = new Set<string>();
  private readonly _commands: CommandRegistry;
  private readonly _text = h('input', 'jp-mod-styled dn-run-search');
  private readonly _state = select('dn-run-filter-state', 'Only runs in this state');
  private readonly _cluster = select(
    'dn-run-filter-cluster',
    'Only runs of this cluster'
  );
  private readonly _since = h('input', 'jp-mod-styled dn-run-filter-since');
  private readonly _count = h('span', 'dn-run-count');
  private readonly _overlay = h(
    'button',
    'jp-Button jp-mod-styled dn-overlay-button',
    'Overlay'
  );
  private readonly _delete = h(
    'button',
    'jp-Button jp-mod-styled dn-delete-button',
    'Delete'
  );
  private readonly _prune = h(
    'button',
    'jp-Button jp-mod-styled dn-prune-button',
    'Prune…'
  );
  private readonly _list = h('ul', 'dn-runs');
  private _runs: readonly IRunModel[] = [];
  private _current: IRunModel | null = null;

  constructor(commands: CommandRegistry) {
    this._commands = commands;
    this._text.type = 'search';
    this._text.placeholder = 'Search runs by name';
    this._since.type = 'date';
    this._since.title = 'Only runs started on or after this day';
    this._state.append(option('', 'any state'), ...STATES.map(s => option(s, s)));
    this._overlay.title = 'Overlay the curves of the selected runs in one tab';
    this._delete.title =
      'Delete the selected runs (ended runs only) with their records';
    this._prune.title = 'Delete every ended run started before a date';
    for (const input of [this._text, this._state, this._cluster, this._since]) {
      input.addEventListener('input', () => this.render(this._runs, this._current));
    }
    this._overlay.addEventListener('click', () => {
      void this._commands.execute(CommandIDs.overlayRuns, {
        runIds: [...this.selected]
      });
    });
    this._delete.addEventListener('click', () => {
      void this._commands.execute(CommandIDs.deleteRuns, {
        runIds: [...this.selected]
      });
    });
    this._prune.addEventListener('click', () => {
      void this._commands.execute(CommandIDs.pruneRuns);
    });
    const filters = h('div', 'dn-run-filters');
    filters.append(this._text, this._state, this._cluster, this._since);
    const tools = h('div', 'dn-run-tools');
    tools.append(this._count, this._overlay, this._delete, this._prune);
    this.node.append(h('h3', 'dn-section-title', 'Runs'), filters, tools, this._list);
  }

  get filter(): IRunFilter {
    return {
      text: this._text.value,
      state: this._state.value,
      cluster: this._cluster.value,
      since: this._since.value
    };
  }

  render(runs: readonly IRunModel[], current: IRunModel | null): void {
    this._runs = runs;
    this._current = current;
    for (const id of [...this.selected]) {
      if (!runs.some(r => r.id === id)) {
        this.selected.delete(id);
      }
    }
    this._syncClusters(runs);
    const shown = filterRuns(runs, this.filter);
    const rows = shown.slice(0, MAX_ROWS);
    const more = shown.length > rows.length ? ` (first ${rows.length} shown)` : '';
    setText(this._count, `${shown.length} of ${runs.length} runs${more}`);
    syncChildren(
      this._list,
      rows,
      r => r.id,
      r => this._createRow(r),
      (item, r) => this._updateRow(item, r)
    );
    this._overlay.disabled = this.selected.size < 2;
    this._delete.disabled = this.selected.size === 0;
  }

  private _syncClusters(runs: readonly IRunModel[]): void {
    const ids = [...new Set(runs.map(r => r.cluster_id))];
    const key = ids.join(',');
    if (this._cluster.dataset.key === key) {
      return;
    }
    const chosen = this._cluster.value;
    this._cluster.dataset.key = key;
    this._cluster.replaceChildren(
      option('', 'any cluster'),
      ...ids.map(id => option(id, `cluster ${id}`))
    );
    this._cluster.value = ids.includes(chosen) ? chosen : '';
  }

  private _createRow(run: IRunModel): HTMLLIElement {
    const item = h('li', 'dn-run-item');
    item.dataset.runId = run.id;
    item.tabIndex = 0;
    item.title =
      'Open this run in a tab: flags, code, per-rank results, output, curves';
    const open = () => this._commands.execute(CommandIDs.openRun, { runId: run.id });
    item.addEventListener('click', open);
    item.addEventListener('keydown', e => {
      if (e.key === 'Enter') {
        void open();
      }
    });
    const check = h('input', 'dn-run-select');
    check.type = 'checkbox';
    check.title = 'Select for overlay or deletion';
    check.addEventListener('click', e => e.stopPropagation());
    check.addEventListener('change', () => {
      if (check.checked) {
        this.selected.add(run.id);
      } else {
        this.selected.delete(run.id);
      }
      this.render(this._runs, this._current);
    });
    item.append(
      check,
      h('span', 'dn-run-name'),
      h('span', 'dn-run-state'),
      h('span', 'dn-run-time')
    );
    return item;
  }

  private _updateRow(item: HTMLElement, run: IRunModel): void {
    item.dataset.state = run.state;
    item.classList.toggle('dn-mod-current', run.id === this._current?.id);
    item.querySelector<HTMLInputElement>('.dn-run-select')!.checked = this.selected.has(
      run.id
    );
    setText(item.querySelector('.dn-run-name')!, run.name);
    setText(item.querySelector('.dn-run-state')!, run.state);
    setText(item.querySelector('.dn-run-time')!, formatWhen(run.started));
    if (run.error) {
      item.title = `${run.state}: ${run.error}`;
    }
  }
}
