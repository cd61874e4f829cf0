/**
 * A ranks x time heatmap of a per-step time (step time, comm time, or step minus comm):
 * one row per rank, coloured against the median of every cell, so a slow rank is a red
 * line across the run and a rank that waits for it a blue one. Shown by the chart beyond
 * BANDED_BEYOND ranks; a click on a row picks that rank for the chart (`onPick`).
 *
 * Drawn on a canvas (64 ranks x a few hundred columns are too many SVG nodes to update
 * several times a second); the matrix is band.ts's `heatOf`, tested under node.
 */
import { h, setText } from '../dom';
import { HEAT_MID, heatColor, heatOf, IHeat } from './band';
import { ChartData, formatNumber, IPoint, IRange, XAxis } from './data';

/** What the heatmap can show, by key: a system series or step minus comm. */
export const HEAT_SERIES: { [key: string]: string } = {
  outside: 'step − comm time (s)',
  'system:step_time': 'step time (s)',
  'system:comm_time': 'comm time (s)'
};

const LABEL_W = 46;
const MAX_H = 192;
/** How long (ms) a theme change is watched for its new colours to apply: JupyterLab sets
 * the body's theme attributes before the theme's CSS has loaded, which on a busy
 * machine can take seconds. */
const THEME_WATCH_MS = 10_000;

/**
 * A CSS colour as [r, g, b] (what a canvas makes of it), or null: `rgb()`, `rgba()` and
 * `#rrggbb`, the forms a canvas's fillStyle reads back.
 */
export function rgbOf(css: string): number[] | null {
  const hex = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(css.trim());
  if (hex) {
    return hex.slice(1, 4).map(x => parseInt(x, 16));
  }
  const fn = /^rgba?\(\s*([\d.]+)[\s,]+([\d.]+)[\s,]+([\d.]+)/i.exec(css.trim());
  return fn ? fn.slice(1, 4).map(x => Math.round(Number(x))) : null;
}

/** Calls *redraw* when the page's theme changes (JupyterLab, VS Code, a system dark
 * mode): the body's theme attributes or class, then each frame until the colours that
 * *probe* reads have changed, since the new theme's CSS may apply a moment later. */
export function watchTheme(probe: () => string, redraw: () => void): () => void {
  if (typeof MutationObserver !== 'function' || typeof document === 'undefined') {
    return () => undefined;
  }
  let frame: number | null = null;
  let until = 0;
  let seen = probe();
  const tick = (): void => {
    frame = null;
    const now = probe();
    if (now !== seen) {
      seen = now;
      redraw();
    }
    if (performance.now() < until) {
      frame = requestAnimationFrame(tick);
    }
  };
  const changed = (): void => {
    until = performance.now() + THEME_WATCH_MS;
    if (frame === null) {
      frame = requestAnimationFrame(tick);
    }
  };
  const observer = new MutationObserver(changed);
  observer.observe(document.body, {
    attributes: true,
    attributeFilter: [
      'class',
      'data-jp-theme-light',
      'data-jp-theme-name',
      'data-vscode-theme-kind'
    ]
  });
  const dark =
    typeof matchMedia === 'function'
      ? matchMedia('(prefers-color-scheme: dark)')
      : null;
  dark?.addEventListener('change', changed);
  return () => {
    observer.disconnect();
    dark?.removeEventListener('change', changed);
    if (frame !== null) {
      cancelAnimationFrame(frame);
    }
  };
}

/** A rank's step time minus its comm time, record by record (matched by time). */
export function outsideComm(
  steps: readonly IPoint[],
  comms: readonly IPoint[]
): IPoint[] {
  const comm = new Map(comms.map(p => [p.time, p.value]));
  return steps.map(p => {
    const c = comm.get(p.time) ?? 0;
    return { ...p, value: Math.max(0, p.value - Math.min(c, p.value)) };
  });
}

/** The rows' series of *key* from *data*, one per rank. */
export function heatSeries(data: ChartData, key: string): Map<number, IPoint[]> {
  const out = new Map<number, IPoint[]>();
  for (const rank of data.ranks) {
    const points =
      key === 'outside'
        ? outsideComm(
            data.series(rank, 'system:step_time'),
            data.series(rank, 'system:comm_time')
          )
        : [...data.series(rank, key)];
    if (points.length) {
      out.set(rank, points);
    }
  }
  return out;
}

/** The rank whose row is slowest on the whole (highest mean of its cells), or null. */
export function hottest(heat: IHeat): number | null {
  let best: number | null = null;
  let top = -Infinity;
  heat.rows.forEach((row, i) => {
    const cells = Array.from(row).filter(v => !Number.isNaN(v));
    const mean = cells.reduce((a, b) => a + b, 0) / (cells.length || 1);
    if (cells.length && mean > top) {
      top = mean;
      best = heat.ranks[i];
    }
  });
  return best;
}

function option(value: string, label: string): HTMLOptionElement {
  const node = h('option', '', label);
  node.value = value;
  return node;
}

export class HeatmapView {
  readonly node = h('div', 'dn-chart-heat');
  /** Called with the rank of a clicked row. */
  onPick: ((rank: number) => void) | null = null;
  /** The key shown (HEAT_SERIES); null: step minus comm where comm is reported. */
  series: string | null = null;
  heat: IHeat | null = null;
  private readonly _select = h('select', 'dn-chart-heat-series');
  private readonly _canvas = h('canvas', 'dn-chart-heat-canvas');
  private readonly _note = h('span', 'dn-chart-heat-note');
  private _rowH = 4;
  private _width = 0;
  private readonly _unwatch: () => void;

  constructor() {
    // The cells' neutral and the labels follow the theme: redrawn when it changes.
    this._unwatch = watchTheme(
      () => this._colors().join(' '),
      () => this._draw(this.heat, this._width)
    );
    for (const [key, label] of Object.entries(HEAT_SERIES)) {
      this._select.append(option(key, label));
    }
    const bar = h('div', 'dn-chart-heat-bar');
    bar.append(
      h('span', 'dn-chart-heat-title', 'per rank: '),
      this._select,
      this._note
    );
    this.node.append(bar, this._canvas);
    this._select.addEventListener('change', () => {
      this.series = this._select.value;
      this.onChange?.();
    });
    this._canvas.addEventListener('click', e => {
      const rank = this._rankAt(e);
      if (rank !== null) {
        this.onPick?.(rank);
      }
    });
    this._canvas.addEventListener('mousemove', e => {
      const rank = this._rankAt(e);
      this._canvas.title =
        rank === null ? '' : `rank ${rank}: click to draw it in the chart`;
    });
  }

  dispose(): void {
    this._unwatch();
  }

  /** The theme's colours the canvas uses: the median cell's and the labels'. */
  private _colors(): [string, string] {
    if (typeof getComputedStyle !== 'function') {
      return ['', ''];
    }
    const style = getComputedStyle(this.node);
    return [style.getPropertyValue('--dn-heat-mid').trim(), style.color];
  }

  /** Called when the user picks another series (the chart redraws). */
  onChange: (() => void) | null = null;

  private _rankAt(e: MouseEvent): number | null {
    const box = this._canvas.getBoundingClientRect();
    const row = Math.floor((e.clientY - box.top) / this._rowH);
    return this.heat?.ranks[row] ?? null;
  }

  /** The key drawn: the chosen one, else step minus comm where comm is reported. */
  key(data: ChartData): string {
    if (this.series !== null) {
      return this.series;
    }
    const comm = data.ranks.some(r => data.series(r, 'system:comm_time').length);
    return comm ? 'outside' : 'system:step_time';
  }

  update(
    data: ChartData,
    axis: XAxis,
    zoom: IRange | null,
    width: number,
    show: boolean
  ): void {
    this.node.hidden = !show;
    if (!show) {
      this.heat = null;
      return;
    }
    const key = this.key(data);
    this._select.value = key;
    const t0 = data.t0 ?? 0;
    const columns = Math.max(8, Math.floor((width - LABEL_W - 8) / 3));
    const heat = heatOf(heatSeries(data, key), axis, t0, zoom, columns);
    this.heat = heat;
    this.node.dataset.series = key;
    this.node.dataset.ranks = String(heat?.ranks.length ?? 0);
    this.node.dataset.hottest = heat === null ? '' : String(hottest(heat) ?? '');
    setText(
      this._note,
      heat
        ? ` · median ${formatNumber(heat.median)} s · red: slower, blue: faster (×2 full)`
        : ' · no step times yet'
    );
    this._draw(heat, width);
  }

  private _draw(heat: IHeat | null, width: number): void {
    this._width = width;
    const rows = heat?.ranks.length ?? 0;
    this._rowH = rows ? Math.max(2, Math.min(10, Math.floor(MAX_H / rows))) : 4;
    const height = Math.max(1, rows * this._rowH);
    const ratio = typeof devicePixelRatio === 'number' ? devicePixelRatio : 1;
    this._canvas.width = Math.round(width * ratio);
    this._canvas.height = Math.round(height * ratio);
    this._canvas.style.width = `${width}px`;
    this._canvas.style.height = `${height}px`;
    const ctx = this._canvas.getContext('2d');
    if (ctx === null || heat === null) {
      return;
    }
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const [midCss, labelCss] = this._colors();
    // The canvas reads the theme's colour back as #rrggbb or rgba(): one form to parse.
    ctx.fillStyle = `rgb(${HEAT_MID.join(',')})`;
    if (midCss) {
      ctx.fillStyle = midCss;
    }
    const pale = rgbOf(String(ctx.fillStyle)) ?? HEAT_MID;
    this.node.dataset.mid = pale.join(',');
    const cw = (width - LABEL_W - 8) / heat.columns;
    heat.rows.forEach((row, i) => {
      row.forEach((v, j) => {
        ctx.fillStyle = heatColor(v, heat.median, pale);
        // Whole pixels, each cell meeting the next: no seams between columns.
        const x0 = Math.floor(LABEL_W + j * cw);
        const x1 = Math.ceil(LABEL_W + (j + 1) * cw);
        ctx.fillRect(x0, i * this._rowH, x1 - x0, this._rowH);
      });
    });
    // Rank labels: every rank where rows are tall enough, else every 8th.
    const every = this._rowH >= 9 ? 1 : Math.ceil(10 / this._rowH / 8) * 8;
    ctx.fillStyle = labelCss || '#808080';
    ctx.font = '10px sans-serif';
    ctx.textAlign = 'right';
    ctx.textBaseline = 'top';
    heat.ranks.forEach((rank, i) => {
      if (i % every === 0) {
        ctx.fillText(`rank ${rank}`, LABEL_W - 4, i * this._rowH);
      }
    });
  }
}
