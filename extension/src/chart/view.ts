/**
 * The run chart: per-rank curves of any reported metric plus their mean, with hover,
 * smoothing, log scale, zoom (drag across the plot; Reset or a double click undoes
 * it) and x by step or wall time, above the summary's per-rank and per-host bars.
 * Beyond BANDED_BEYOND ranks it is banded (band.ts): the median across ranks, their
 * min-max band and the few ranks that deviate most (named), any rank pickable from the
 * toolbar or the ranks x time heatmap below the plot (heatmap.ts).
 *
 * One component for the notebook cell's live view and the side panel's run tab. It
 * knows nothing of where records come from: call `addRecords` and `setSummary`; it
 * redraws once per animation frame at most, updating its elements in place. Plain DOM,
 * no JupyterLab imports; colours and fonts are JupyterLab's theme variables.
 */
import type { IRecord, IRunSummary } from '../protocol';
import { h, setText, svg, syncChildren } from '../dom';
import {
  BANDED_BEYOND,
  bandOf,
  bandPath,
  IBand,
  IBandPoint,
  mostDeviating
} from './band';
import { BarsView } from './bars';
import { HeatmapView } from './heatmap';
import {
  ChartData,
  colorIndex,
  downsample,
  extentOf,
  formatNumber,
  IPoint,
  IRange,
  linePath,
  nearest,
  scale,
  smooth,
  SYSTEM_SERIES,
  tickFormat,
  ticks,
  XAxis,
  xOf
} from './data';

const HEIGHT = 200;
const MARGIN = { left: 46, right: 8, top: 8, bottom: 22 };
const MEAN = -1;
const MEDIAN = -2;

/** Why a rank is drawn in a banded chart (its legend says so). */
type Named = 'straggler' | 'deviates' | 'picked';
const NAMED_TEXT: { [why in Named]: string } = {
  straggler: ' (straggler)',
  deviates: ' (deviates most)',
  picked: ' ×'
};

/** What a draw showed, for whoever measures the view (see `onDraw`). */
export interface IDrawInfo {
  /** Times (seconds since the epoch) of the records drawn for the first time. */
  recordTimes: number[];
  points: number;
}

function option(value: string, label: string): HTMLOptionElement {
  const node = h('option', '', label);
  node.value = value;
  return node;
}

export class ChartView {
  readonly node = h('div', 'dn-chart');
  readonly data = new ChartData();
  metric = 'loss';
  xAxis: XAxis = 'step';
  smoothing = 0;
  log = false;
  zoom: IRange | null = null;
  /** The name of a series in the legend and the hover: a rank, or (overlay) a run. */
  seriesName: (key: number) => string = key => `rank ${key}`;
  /** What one series is ('rank', or 'run' in an overlay), for the chart's label. */
  seriesNoun = 'rank';
  /** Whether to draw the mean of the series: over ranks yes; over runs it means nothing. */
  showMean = true;
  /** Called after each draw (for measurements); never needed to use the chart. */
  onDraw: ((info: IDrawInfo) => void) | null = null;
  draws = 0;
  /** Ranks the user picked to draw in a banded chart (the toolbar, the heatmap). */
  readonly picked = new Set<number>();
  /** Whether the last draw was banded, and the ranks it named, with why. */
  banded = false;
  named = new Map<number, Named>();

  private _summary: IRunSummary | null = null;
  private _pending: number[] = [];
  private _frame: number | null = null;
  private _drawn = { version: -1, width: 0, key: '' };
  private readonly _bars = new BarsView();
  private readonly _heat = new HeatmapView();
  private readonly _pick = h('select', 'dn-chart-pick');
  private readonly _band = svg('path', 'dn-chart-band');
  private _bandData: IBand | null = null;
  private readonly _metric = h('select', 'dn-chart-metric');
  private readonly _axis = h('select', 'dn-chart-xaxis');
  private readonly _smooth = h('input', 'dn-chart-smoothing');
  private readonly _log = h('input', 'dn-chart-log');
  private readonly _reset = h('button', 'dn-chart-reset', 'Reset zoom');
  private readonly _plot = h('div', 'dn-chart-plot');
  private readonly _svg = svg('svg', 'dn-chart-svg');
  private readonly _grid = svg('g', 'dn-chart-grid');
  private readonly _lines = svg('g', 'dn-chart-lines');
  private readonly _rule = svg('line', 'dn-chart-rule');
  private readonly _brush = svg('rect', 'dn-chart-brush');
  private readonly _tip = h('div', 'dn-chart-tip');
  private readonly _legend = h('div', 'dn-chart-legend');
  private readonly _empty = h('div', 'dn-chart-empty', 'No values yet');
  /** The run's verdict line (dist_notebook/verdict.py): why its steps are slow. */
  private readonly _verdict = h('div', 'dn-chart-verdict');
  private _scales: { x: (v: number) => number; xInv: (px: number) => number } | null =
    null;
  private _dragFrom: number | null = null;
  /** Where the pointer rests over the plot (px from its left), or null: each draw
   * shows the values under it again, so the tooltip follows the axis as it rescales. */
  private _hoverPx: number | null = null;
  /** Redraws when the plot's width changes (a panel resized, a notebook widened). */
  private readonly _resize: ResizeObserver | null =
    typeof ResizeObserver === 'function'
      ? new ResizeObserver(() => this.requestDraw())
      : null;

  constructor() {
    this._smooth.type = 'range';
    this._smooth.min = '0';
    this._smooth.max = '0.99';
    this._smooth.step = '0.01';
    this._smooth.value = '0';
    this._smooth.title = 'smoothing';
    this._log.type = 'checkbox';
    this._axis.append(option('step', 'x: step'), option('time', 'x: time'));
    const logLabel = h('label', 'dn-chart-toggle');
    logLabel.append(this._log, document.createTextNode(' log'));
    const smoothLabel = h('label', 'dn-chart-toggle');
    smoothLabel.append(document.createTextNode('smooth '), this._smooth);
    const bar = h('div', 'dn-chart-toolbar');
    this._pick.title = 'draw one rank beside the median and band';
    bar.append(
      this._metric,
      this._axis,
      smoothLabel,
      logLabel,
      this._pick,
      this._reset
    );
    this._svg.setAttribute('role', 'img');
    this._rule.setAttribute('visibility', 'hidden');
    this._brush.setAttribute('visibility', 'hidden');
    this._svg.append(this._grid, this._band, this._lines, this._rule, this._brush);
    this._tip.hidden = true;
    this._plot.append(this._svg, this._tip, this._empty);
    this._verdict.hidden = true;
    this.node.append(
      this._verdict,
      bar,
      this._plot,
      this._legend,
      this._heat.node,
      this._bars.node
    );
    this._heat.onPick = rank => this.pick(rank);
    this._heat.onChange = () => {
      this._drawn.key = '';
      this.requestDraw();
    };
    this._listen();
    this._resize?.observe(this._plot);
  }

  /** Stop watching the plot's size and drop a pending draw (the view is going away). */
  dispose(): void {
    this._resize?.disconnect();
    this._heat.dispose();
    if (this._frame !== null && typeof cancelAnimationFrame === 'function') {
      cancelAnimationFrame(this._frame);
    }
    this._frame = null;
  }

  /** New records (any order of ranks; older ones than a rank's newest are dropped). */
  addRecords(records: readonly IRecord[]): void {
    if (this.data.add(records)) {
      for (const r of records) {
        this._pending.push(r.time);
      }
      this.requestDraw();
    }
  }

  /** Forget every record (a history is about to be sent again). */
  clear(): void {
    this.data.clear();
    this.requestDraw();
  }

  get summary(): IRunSummary | null {
    return this._summary;
  }

  setSummary(summary: IRunSummary | null): void {
    this._summary = summary;
    this.requestDraw();
  }

  requestDraw(): void {
    if (this._frame !== null) {
      return;
    }
    const run = (): void => {
      this._frame = null;
      this.draw();
    };
    this._frame =
      typeof requestAnimationFrame === 'function'
        ? requestAnimationFrame(run)
        : (setTimeout(run, 0) as unknown as number);
  }

  /** Draw now (normally through requestDraw, once per frame). */
  draw(): void {
    const stragglers = new Set(
      (this._summary?.ranks ?? []).filter(r => r.straggler).map(r => r.rank)
    );
    this._bars.update(this._summary);
    const verdict = this._summary?.verdict ?? null;
    this._verdict.hidden = !verdict;
    setText(this._verdict, verdict ? `verdict: ${verdict}` : '');
    this._syncMetrics();
    const width = Math.max(160, Math.round(this._plot.clientWidth || 480));
    const key = [
      this.metric,
      this.xAxis,
      this.smoothing,
      this.log,
      this.zoom?.lo,
      this.zoom?.hi,
      [...stragglers].join(),
      [...this.picked].join(),
      this._heat.series
    ].join('|');
    if (
      this._drawn.version === this.data.version &&
      this._drawn.width === width &&
      this._drawn.key === key
    ) {
      return;
    }
    this._drawn = { version: this.data.version, width, key };
    const points = this._drawLines(width, stragglers);
    if (this._hoverPx !== null && this._scales !== null) {
      this.showHover(this._scales.xInv(this._hoverPx));
    }
    this.draws += 1;
    this.node.dataset.draws = String(this.draws);
    const recordTimes = this._pending;
    this._pending = [];
    this.onDraw?.({ recordTimes, points });
  }

  /** Pick *rank* to draw in the banded chart (again: drop it). */
  pick(rank: number): void {
    if (!this.picked.delete(rank)) {
      this.picked.add(rank);
    }
    this.requestDraw();
  }

  private _curves(width: number, stragglers: Set<number>): Map<number, IPoint[]> {
    const t0 = this.data.t0 ?? 0;
    const buckets = Math.max(16, width - MARGIN.left - MARGIN.right);
    const curves = new Map<number, IPoint[]>();
    const add = (key: number, points: readonly IPoint[]): void => {
      const smoothed = smooth(points, this.smoothing);
      curves.set(key, downsample(smoothed, buckets, this.xAxis, t0, this.zoom));
    };
    const ranks = this.data.ranks.filter(r => this.data.series(r, this.metric).length);
    this.banded = this.showMean && ranks.length > BANDED_BEYOND;
    this.named = new Map();
    this._bandData = null;
    if (this.banded) {
      // The band from every rank (smoothed as drawn); lines for the few it names.
      const all = new Map(
        ranks.map(r => [r, smooth(this.data.series(r, this.metric), this.smoothing)])
      );
      this._bandData = bandOf(all, this.xAxis, t0, this.zoom, Math.floor(buckets / 2));
      for (const r of mostDeviating(this._bandData.deviation)) {
        this.named.set(r, 'deviates');
      }
      for (const r of ranks.filter(r => stragglers.has(r))) {
        this.named.set(r, 'straggler');
      }
      for (const r of ranks.filter(r => this.picked.has(r))) {
        this.named.set(r, 'picked');
      }
      for (const r of [...this.named.keys()].sort((a, b) => a - b)) {
        add(r, this.data.series(r, this.metric));
      }
      return curves;
    }
    for (const rank of ranks) {
      add(rank, this.data.series(rank, this.metric));
    }
    if (this.showMean && curves.size > 1) {
      add(MEAN, this.data.mean(this.metric));
    }
    return curves;
  }

  /** The band's median as a curve, and its lo and hi as points (for the extent). */
  private _bandCurves(t0: number): { mid: IPoint[]; edges: IPoint[][] } {
    const pts = this._bandData?.points ?? [];
    const at = (p: IBandPoint, value: number): IPoint =>
      this.xAxis === 'step'
        ? { step: p.x, time: t0, value }
        : { step: 0, time: p.x + t0, value };
    return {
      mid: pts.map(p => at(p, p.mid)),
      edges: [pts.map(p => at(p, p.lo)), pts.map(p => at(p, p.hi))]
    };
  }

  private _drawLines(width: number, stragglers: Set<number>): number {
    const t0 = this.data.t0 ?? 0;
    const curves = this._curves(width, stragglers);
    const band = this._bandCurves(t0);
    if (this.banded) {
      curves.set(MEDIAN, band.mid);
    }
    const extent = extentOf(
      [...curves.values(), ...band.edges],
      this.xAxis,
      t0,
      this.log
    );
    this.node.classList.toggle('dn-mod-banded', this.banded);
    this.node.dataset.banded = String(this.banded);
    this._syncPick();
    this.node.classList.toggle('dn-mod-empty', extent === null);
    this._empty.hidden = extent !== null;
    this._svg.setAttribute('viewBox', `0 0 ${width} ${HEIGHT}`);
    this._svg.setAttribute('width', String(width));
    this._svg.setAttribute('height', String(HEIGHT));
    const x = this.zoom ?? extent?.x ?? { lo: 0, hi: 1 };
    const y = extent?.y ?? { lo: 0, hi: 1 };
    const sx = scale(x, MARGIN.left, width - MARGIN.right);
    const sy = scale(y, HEIGHT - MARGIN.bottom, MARGIN.top, this.log);
    const span = width - MARGIN.left - MARGIN.right;
    this._scales = {
      x: sx,
      xInv: px => x.lo + ((px - MARGIN.left) / span) * (x.hi - x.lo)
    };
    this._drawGrid(x, y, sx, sy, width, extent !== null);
    this._band.setAttribute(
      'd',
      extent && this._bandData ? bandPath(this._bandData.points, sx, sy, this.log) : ''
    );
    this._heat.update(this.data, this.xAxis, this.zoom, width, this.banded);
    const keys = extent ? [...curves.keys()] : [];
    let count = 0;
    syncChildren(
      this._lines,
      keys,
      k => String(k),
      k => {
        const path = svg('path', 'dn-chart-line');
        path.setAttribute('data-rank', keyName(k));
        return path;
      },
      (path, k) => {
        const pts = curves.get(k) ?? [];
        count += pts.length;
        path.setAttribute('d', linePath(pts, sx, sy, this.xAxis, t0, this.log));
        const slow = stragglers.has(k) ? ' dn-straggler' : '';
        path.setAttribute('class', `dn-chart-line ${keyColor(k)}${slow}`);
      }
    );
    this._drawLegend(keys, stragglers);
    this._svg.setAttribute(
      'aria-label',
      `${this._label(this.metric)} per ${this.seriesNoun}`
    );
    return count;
  }

  private _drawGrid(
    x: IRange,
    y: IRange,
    sx: (v: number) => number,
    sy: (v: number) => number,
    width: number,
    show: boolean
  ): void {
    const xt = show ? ticks(x, Math.max(2, Math.floor(width / 90))) : [];
    const yt = show ? ticks(y, 4, this.log) : [];
    const xf = tickFormat(xt);
    const yf = tickFormat(yt);
    const items = [
      ...xt.map(v => ({ key: `x${v}`, v, axis: 'x' })),
      ...yt.map(v => ({ key: `y${v}`, v, axis: 'y' }))
    ];
    syncChildren(
      this._grid,
      items,
      t => t.key,
      () => {
        const g = svg('g', 'dn-chart-tick');
        g.append(svg('line', ''), svg('text', ''));
        return g;
      },
      (g, t) => {
        const line = g.firstElementChild as SVGLineElement;
        const text = g.lastElementChild as SVGTextElement;
        if (t.axis === 'x') {
          const px = sx(t.v).toFixed(1);
          setAttrs(line, {
            x1: px,
            x2: px,
            y1: MARGIN.top,
            y2: HEIGHT - MARGIN.bottom
          });
          setAttrs(text, { x: px, y: HEIGHT - 6, 'text-anchor': 'middle' });
          setText(text, this.xAxis === 'time' ? `${xf(t.v)} s` : xf(t.v));
        } else {
          const py = sy(t.v).toFixed(1);
          setAttrs(line, { x1: MARGIN.left, x2: width - MARGIN.right, y1: py, y2: py });
          setAttrs(text, {
            x: MARGIN.left - 4,
            y: Number(py) + 3,
            'text-anchor': 'end'
          });
          setText(text, yf(t.v));
        }
      }
    );
  }

  private _drawLegend(keys: number[], stragglers: Set<number>): void {
    // Banded: the median first, then the band, then the ranks drawn and why.
    const BAND = -3;
    const items = this.banded ? [MEDIAN, BAND, ...keys.filter(k => k >= 0)] : keys;
    const ranks = this.data.ranks.filter(r => this.data.series(r, this.metric).length);
    syncChildren(
      this._legend,
      items,
      k => String(k),
      k => {
        const item = h('span', 'dn-chart-legend-item');
        const color = k === BAND ? 'dn-chart-band' : keyColor(k);
        item.append(h('span', `dn-chart-swatch ${color}`), h('span', ''));
        item.dataset.rank = k === BAND ? 'band' : keyName(k);
        if (k >= 0) {
          item.addEventListener('click', () => {
            if (this.picked.has(k)) {
              this.pick(k);
            }
          });
        }
        return item;
      },
      (item, k) => {
        item.classList.toggle('dn-straggler', stragglers.has(k));
        const why = this.named.get(k);
        item.dataset.named = why ?? '';
        item.title = why === 'picked' ? 'click to drop it' : '';
        let text: string;
        if (k === MEAN) {
          text = 'mean';
        } else if (k === MEDIAN) {
          text = `median of ${ranks.length} ${this.seriesNoun}s`;
        } else if (k === BAND) {
          text = 'min–max';
        } else if (why !== undefined) {
          text = `${this.seriesName(k)}${NAMED_TEXT[why]}`;
        } else {
          text = `${this.seriesName(k)}${stragglers.has(k) ? ' (straggler)' : ''}`;
        }
        setText(item.lastElementChild as HTMLElement, text);
      }
    );
  }

  /** The toolbar's rank picker: shown only banded, listing every rank. */
  private _syncPick(): void {
    this._pick.hidden = !this.banded;
    const ranks = this.banded ? this.data.ranks : [];
    const items = ['', ...ranks.map(String)];
    syncChildren(
      this._pick,
      items,
      v => v,
      v => option(v, v === '' ? 'show rank…' : `rank ${v}`),
      () => undefined
    );
    this._pick.value = '';
  }

  private _label(metric: string): string {
    return SYSTEM_SERIES[metric] ?? metric;
  }

  private _syncMetrics(): void {
    const names = this.data.metrics;
    if (names.length && !names.includes(this.metric)) {
      this.metric = names[0];
    }
    syncChildren(
      this._metric,
      names,
      m => m,
      m => option(m, this._label(m)),
      () => undefined
    );
    if (this._metric.value !== this.metric && names.includes(this.metric)) {
      this._metric.value = this.metric;
    }
  }

  private _listen(): void {
    const redraw = (): void => this.requestDraw();
    this._metric.addEventListener('change', () => {
      this.metric = this._metric.value;
      redraw();
    });
    this._axis.addEventListener('change', () => {
      this.xAxis = this._axis.value as XAxis;
      this.zoom = null;
      redraw();
    });
    this._smooth.addEventListener('input', () => {
      this.smoothing = Number(this._smooth.value);
      redraw();
    });
    this._log.addEventListener('change', () => {
      this.log = this._log.checked;
      redraw();
    });
    this._pick.addEventListener('change', () => {
      const value = this._pick.value;
      if (value !== '') {
        this.picked.add(Number(value));
        this.requestDraw();
      }
    });
    this._reset.addEventListener('click', () => this.resetZoom());
    this._svg.addEventListener('dblclick', () => this.resetZoom());
    this._svg.addEventListener('mousedown', e => {
      this._dragFrom = this._localX(e);
    });
    this._svg.addEventListener('mousemove', e => this._hover(e));
    this._svg.addEventListener('mouseleave', () => {
      this._hoverPx = null;
      this._hideHover();
    });
    this._svg.addEventListener('mouseup', e => this._endDrag(e));
  }

  resetZoom(): void {
    this.zoom = null;
    this.requestDraw();
  }

  private _localX(e: MouseEvent): number {
    const box = this._svg.getBoundingClientRect();
    return e.clientX - box.left;
  }

  private _endDrag(e: MouseEvent): void {
    const from = this._dragFrom;
    this._dragFrom = null;
    this._brush.setAttribute('visibility', 'hidden');
    const to = this._localX(e);
    if (from === null || this._scales === null || Math.abs(to - from) < 4) {
      return;
    }
    const a = this._scales.xInv(Math.min(from, to));
    const b = this._scales.xInv(Math.max(from, to));
    this.zoom = { lo: a, hi: b };
    this.requestDraw();
  }

  private _hover(e: MouseEvent): void {
    if (this._scales === null || this.data.t0 === null) {
      return;
    }
    const px = this._localX(e);
    this._hoverPx = px;
    if (this._dragFrom !== null) {
      const lo = Math.min(this._dragFrom, px);
      setAttrs(this._brush, {
        x: lo,
        y: MARGIN.top,
        width: Math.abs(px - this._dragFrom),
        height: HEIGHT - MARGIN.top - MARGIN.bottom,
        visibility: 'visible'
      });
    }
    this.showHover(this._scales.xInv(px));
  }

  /** Show the values nearest to *x* (a data value on the x axis) in the tooltip. */
  showHover(x: number): void {
    const t0 = this.data.t0;
    if (this._scales === null || t0 === null) {
      return;
    }
    const rows: HTMLElement[] = [];
    let at: IPoint | null = null;
    if (this.banded) {
      const band = this._bandRow(x);
      if (band !== null) {
        rows.push(band);
      }
    }
    // Banded: the band and the named ranks (the step and time of the first rank's).
    const shown = this.banded
      ? [...this.named.keys(), ...this.data.ranks.slice(0, 1)]
      : this.data.ranks;
    for (const [i, rank] of shown.entries()) {
      const p = nearest(
        smooth(this.data.series(rank, this.metric), this.smoothing),
        x,
        this.xAxis,
        t0
      );
      if (p === null) {
        continue;
      }
      at = at ?? p;
      if (this.banded && i === shown.length - 1) {
        break;
      }
      const row = h('div', 'dn-chart-tip-row');
      row.dataset.rank = String(rank);
      row.append(
        h('span', `dn-chart-swatch dn-color-${colorIndex(rank)}`),
        h('span', '', `${this.seriesName(rank)}: ${formatNumber(p.value)}`)
      );
      rows.push(row);
    }
    if (at === null) {
      this._hideHover();
      return;
    }
    const head = h(
      'div',
      'dn-chart-tip-head',
      `step ${at.step} · ${formatNumber(at.time - t0)} s · ${this._label(this.metric)}`
    );
    this._tip.replaceChildren(head, ...rows);
    this._tip.hidden = false;
    const px = this._scales.x(xOf(at, this.xAxis, t0));
    setAttrs(this._rule, {
      x1: px.toFixed(1),
      x2: px.toFixed(1),
      y1: MARGIN.top,
      y2: HEIGHT - MARGIN.bottom,
      visibility: 'visible'
    });
    const left = Math.min(px + 8, Math.max(0, (this._plot.clientWidth || 480) - 180));
    this._tip.style.left = `${left}px`;
  }

  /** The band's median, min and max nearest to *x*, as a tooltip row. */
  private _bandRow(x: number): HTMLElement | null {
    const pts = this._bandData?.points ?? [];
    if (!pts.length) {
      return null;
    }
    const p = pts.reduce((a, b) => (Math.abs(b.x - x) < Math.abs(a.x - x) ? b : a));
    const row = h('div', 'dn-chart-tip-row');
    row.dataset.rank = 'median';
    row.append(
      h('span', 'dn-chart-swatch dn-chart-mean'),
      h(
        'span',
        '',
        `median ${formatNumber(p.mid)} · min ${formatNumber(p.lo)} · max ${formatNumber(p.hi)}`
      )
    );
    return row;
  }

  private _hideHover(): void {
    this._tip.hidden = true;
    this._rule.setAttribute('visibility', 'hidden');
  }
}

/** A curve's data-rank: its rank, or 'mean' / 'median'. */
function keyName(k: number): string {
  return k === MEAN ? 'mean' : k === MEDIAN ? 'median' : String(k);
}

function keyColor(k: number): string {
  return k === MEAN || k === MEDIAN ? 'dn-chart-mean' : `dn-color-${colorIndex(k)}`;
}

function setAttrs(node: Element, attrs: { [name: string]: string | number }): void {
  for (const [name, value] of Object.entries(attrs)) {
    node.setAttribute(name, String(value));
  }
}
