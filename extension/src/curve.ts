/**
 * A line chart of one metric, one line per rank, drawn as SVG and updated in place.
 */
import { h, setText, svg, syncChildren } from './dom';
import { extentOf, formatNumber, linePath, RunSeries } from './series';

/** Drawing box of the SVG (it is scaled to the element's width by CSS). */
const WIDTH = 300;
const HEIGHT = 120;
/** Distinct line colours (style/base.css), reused cyclically over ranks. */
const PALETTE_SIZE = 8;

export function colorClass(rank: number): string {
  return `dn-color-${rank % PALETTE_SIZE}`;
}

export class CurveView {
  readonly node: HTMLDivElement;
  private readonly _svg: SVGSVGElement;
  private readonly _lines: SVGGElement;
  private readonly _max: HTMLElement;
  private readonly _min: HTMLElement;
  private readonly _steps: HTMLElement;
  private readonly _legend: HTMLElement;
  private readonly _empty: HTMLElement;

  /**
   * @param metric - the record field to draw, e.g. `loss`
   * @param className - extra class of the chart's element, e.g. `dn-run-curve`
   */
  constructor(
    readonly metric: string,
    className: string
  ) {
    this.node = h('div', `dn-curve ${className}`);
    this.node.dataset.metric = metric;
    const top = h('div', 'dn-curve-top');
    top.append(
      h('span', 'dn-curve-title', metric),
      (this._max = h('span', 'dn-curve-max'))
    );
    this._svg = svg('svg', 'dn-curve-plot');
    this._svg.setAttribute('viewBox', `0 0 ${WIDTH} ${HEIGHT}`);
    this._svg.setAttribute('preserveAspectRatio', 'none');
    this._svg.setAttribute('role', 'img');
    this._svg.setAttribute('aria-label', `${metric} per rank`);
    this._lines = svg('g', 'dn-curve-lines');
    this._svg.append(this._lines);
    const bottom = h('div', 'dn-curve-bottom');
    bottom.append(
      (this._min = h('span', 'dn-curve-min')),
      (this._steps = h('span', 'dn-curve-steps'))
    );
    this._legend = h('div', 'dn-curve-legend');
    this._empty = h('div', 'dn-curve-empty', 'No values yet');
    this.node.append(top, this._svg, this._empty, bottom, this._legend);
  }

  /** Redraw from *series*; ranks in *highlight* (stragglers) are drawn emphasised. */
  update(series: RunSeries | null, highlight: ReadonlySet<number> = new Set()): void {
    const ranks = series
      ? series.ranks.filter(r => series.curve(r, this.metric).length)
      : [];
    const curves = ranks.map(r => (series as RunSeries).curve(r, this.metric));
    const extent = extentOf(curves);
    this.node.classList.toggle('dn-mod-empty', extent === null);
    syncChildren(
      this._lines,
      extent ? ranks : [],
      r => String(r),
      r => {
        const path = svg('path', `dn-curve-line ${colorClass(r)}`);
        path.setAttribute('data-rank', String(r));
        return path;
      },
      (path, r) => {
        path.setAttribute(
          'd',
          linePath(curves[ranks.indexOf(r)], extent!, WIDTH, HEIGHT)
        );
        path.classList.toggle('dn-straggler', highlight.has(r));
      }
    );
    setText(this._max, extent ? `max ${formatNumber(extent.y1)}` : '');
    setText(this._min, extent ? `min ${formatNumber(extent.y0)}` : '');
    setText(this._steps, extent ? `steps ${extent.x0}–${extent.x1}` : '');
    syncChildren(
      this._legend,
      ranks,
      r => String(r),
      r => {
        const item = h('span', 'dn-legend-item');
        item.dataset.rank = String(r);
        item.append(
          h('span', `dn-legend-swatch ${colorClass(r)}`),
          h('span', '', `rank ${r}`)
        );
        return item;
      },
      (item, r) => item.classList.toggle('dn-straggler', highlight.has(r))
    );
  }
}
