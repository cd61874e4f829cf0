/**
 * Per-rank and per-host bars of a run's summary: samples/s, step time, comm share,
 * the straggler marked. Every number is the summary's (computed once, in Python).
 * Beyond BANDED_BEYOND ranks only the slowest few and the stragglers have a bar, until
 * "all N ranks" is clicked (64 bars would push everything else out of sight).
 */
import type { IHostSummary, IRankSummary, IRunSummary } from '../protocol';
import { h, setText, syncChildren } from '../dom';
import { BANDED_BEYOND } from './band';
import { colorIndex, formatNumber, toNumber } from './data';
import { IRankTime, slowField } from '../nodes';

function finite(v: number | string | null | undefined): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

/** Bars kept beyond BANDED_BEYOND ranks: the ranks with the fewest samples/s. */
export const SLOWEST_BARS = 4;

/**
 * The rows shown beyond BANDED_BEYOND ranks: stragglers and the slowest, in rank order.
 * Slowest: the fewest samples/s, then (in lockstep DDP every rank has the same) the
 * longest wait the others have for it.
 */
export function slowestRows(rows: readonly IBarRow[], count = SLOWEST_BARS): IBarRow[] {
  const slowest = new Set(
    rows
      .filter(r => r.samplesPerS !== null)
      .sort(
        (a, b) =>
          (a.samplesPerS ?? 0) - (b.samplesPerS ?? 0) ||
          (b.wait ?? -Infinity) - (a.wait ?? -Infinity)
      )
      .slice(0, count)
      .map(r => r.key)
  );
  return rows.filter(r => r.straggler || slowest.has(r.key));
}

/** One row of bars: a rank or a host. */
export interface IBarRow {
  key: string;
  label: string;
  color: number | null;
  samplesPerS: number | null;
  stepTime: number | null;
  commShare: number | null;
  straggler: boolean;
  /** Starved of a CPU (the verdict's): the others wait for it, not its code's fault. */
  starved?: boolean;
  /** Peak memory of a step, bytes (GPU: allocated by torch; CPU: RSS high-water). */
  peakMem?: number | null;
  /** How long the others wait for this rank (see nodes.slowField); null: unknown. */
  wait?: number | null;
}

export function rankRows(ranks: readonly IRankSummary[]): IBarRow[] {
  const field = slowField(ranks);
  return ranks.map(r => ({
    key: `rank-${r.rank}`,
    label: `rank ${r.rank}`,
    color: colorIndex(r.rank),
    samplesPerS: toNumber(r.samples_per_s),
    stepTime: toNumber(r.step_time),
    commShare: toNumber(r.comm_share),
    straggler: r.straggler,
    starved: r.starved ?? false,
    peakMem: toNumber(r.peak_mem ?? null),
    wait: field === null ? null : finite((r as IRankTime)[field])
  }));
}

export function hostRows(hosts: readonly IHostSummary[]): IBarRow[] {
  return hosts.map(host => ({
    key: `host-${host.host}`,
    label: `${host.host} (${host.ranks.length})`,
    color: null,
    samplesPerS: toNumber(host.samples_per_s),
    stepTime: null,
    commShare: null,
    straggler: host.straggler
  }));
}

/** Bytes as "812 MB" or "1.4 GB" (powers of 1000, as the end table); '' when unknown. */
export function formatBytes(value: number | null): string {
  if (value === null || !Number.isFinite(value)) {
    return '';
  }
  for (const [unit, size] of [
    ['GB', 1e9],
    ['MB', 1e6],
    ['kB', 1e3]
  ] as const) {
    if (value >= size) {
      return `${Number((value / size).toPrecision(3))} ${unit}`;
    }
  }
  return `${Math.round(value)} B`;
}

/** The width of a bar, in percent of the widest. */
export function barWidth(value: number | null, max: number): number {
  if (value === null || !Number.isFinite(value) || max <= 0) {
    return 0;
  }
  return Math.max(0, Math.min(100, (100 * value) / max));
}

export class BarsView {
  readonly node = h('div', 'dn-chart-bars');
  private readonly _ranks = h('div', 'dn-chart-bar-rows dn-chart-rank-rows');
  private readonly _hostTitle = h('div', 'dn-chart-bars-title', 'per host');
  private readonly _hosts = h('div', 'dn-chart-bar-rows dn-chart-host-rows');
  private readonly _more = h('button', 'dn-chart-bars-more');
  /** Beyond BANDED_BEYOND ranks: whether every rank has its bar. */
  all = false;
  private _last: IRunSummary | null = null;

  constructor() {
    const head = h('div', 'dn-chart-bar-row dn-chart-bar-head');
    head.append(
      h('span', 'dn-chart-bar-label', ''),
      h('span', 'dn-chart-bar-cell', 'samples/s'),
      h('span', 'dn-chart-bar-num', 'step ms'),
      h('span', 'dn-chart-bar-num', 'comm'),
      h('span', 'dn-chart-bar-num dn-chart-peak-mem', 'peak mem')
    );
    this.node.append(head, this._ranks, this._more, this._hostTitle, this._hosts);
    this._more.addEventListener('click', () => {
      this.all = !this.all;
      this.update(this._last);
    });
  }

  update(summary: IRunSummary | null): void {
    this._last = summary;
    const ranks = summary ? rankRows(summary.ranks) : [];
    const hosts = summary ? hostRows(summary.hosts) : [];
    const max = Math.max(0, ...[...ranks, ...hosts].map(r => r.samplesPerS ?? 0));
    const rankMax = Math.max(0, ...ranks.map(r => r.samplesPerS ?? 0));
    const many = ranks.length > BANDED_BEYOND;
    const shown = many && !this.all ? slowestRows(ranks) : ranks;
    this._more.hidden = !many;
    setText(
      this._more,
      this.all ? `the slowest ${SLOWEST_BARS} only` : `all ${ranks.length} ranks`
    );
    this._fill(this._ranks, shown, rankMax);
    // A per-host view only says something when there is more than one host.
    const showHosts = hosts.length > 1;
    this._hostTitle.hidden = !showHosts;
    this._hosts.hidden = !showHosts;
    this._fill(this._hosts, showHosts ? hosts : [], max);
    // No measures (none yet, or an overlay of runs): no header over nothing.
    this.node.hidden = ranks.length === 0 && !showHosts;
  }

  private _fill(parent: HTMLElement, rows: IBarRow[], max: number): void {
    syncChildren(
      parent,
      rows,
      r => r.key,
      () => {
        const row = h('div', 'dn-chart-bar-row');
        const cell = h('span', 'dn-chart-bar-cell');
        cell.append(h('span', 'dn-chart-bar'), h('span', 'dn-chart-bar-value'));
        row.append(
          h('span', 'dn-chart-bar-label'),
          cell,
          h('span', 'dn-chart-bar-num dn-chart-step-ms'),
          h('span', 'dn-chart-bar-num dn-chart-comm'),
          h('span', 'dn-chart-bar-num dn-chart-peak-mem')
        );
        return row;
      },
      (row, r) => {
        row.dataset.row = r.key;
        row.classList.toggle('dn-straggler', r.straggler);
        row.classList.toggle('dn-starved', r.starved ?? false);
        const [label, cell, step, comm, peak] = Array.from(
          row.children
        ) as HTMLElement[];
        const mark = r.straggler ? ' · straggler' : r.starved ? ' · starved' : '';
        setText(label, `${r.label}${mark}`);
        const bar = cell.firstElementChild as HTMLElement;
        bar.className = `dn-chart-bar${r.color === null ? '' : ` dn-color-${r.color}`}`;
        bar.style.width = `${barWidth(r.samplesPerS, max).toFixed(1)}%`;
        setText(cell.lastElementChild as HTMLElement, formatNumber(r.samplesPerS));
        setText(step, r.stepTime === null ? '' : formatNumber(r.stepTime * 1000));
        setText(comm, r.commShare === null ? '' : `${Math.round(r.commShare * 100)}%`);
        setText(peak, formatBytes(r.peakMem ?? null));
      }
    );
  }
}
