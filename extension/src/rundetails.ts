/**
 * The facts of one run under its chart: the magic line it was started with, its code,
 * a table of each rank's result (state, steps, last loss, samples/s, error) and the
 * last lines of each rank's output.
 */
import { formatNumber } from './chart/data';
import { h, setText, syncChildren } from './dom';
import type { IRankSummary, IRunSummary, JsonNumber } from './protocol';
import type { IRunDetailModel, IRunRankModel } from './contracts';

function num(value: JsonNumber | number | null | undefined, digits = 3): string {
  return typeof value === 'number' && Number.isFinite(value)
    ? String(Number(value.toPrecision(digits)))
    : '–';
}

function section(title: string, className: string): [HTMLDetailsElement, HTMLElement] {
  const details = h('details', `dn-runview-section ${className}`);
  details.append(h('summary', '', title));
  const body = h('div', 'dn-runview-section-body');
  details.append(body);
  return [details, body];
}

export class RunDetails {
  readonly node = h('div', 'dn-runview-details');
  private readonly _flags = h('code', 'dn-runview-flags');
  private readonly _code = h('pre', 'dn-runview-code');
  private readonly _ranks = h('tbody', 'dn-runview-ranks-body');
  private readonly _output = h('div', 'dn-runview-output');
  private _shown = '';

  constructor() {
    const flags = h('div', 'dn-runview-flags-line');
    flags.append(h('span', 'dn-runview-label', 'flags: '), this._flags);
    const table = h('table', 'dn-runview-ranks');
    const head = h('tr', '');
    for (const title of ['rank', 'state', 'steps', 'last loss', 'samples/s', 'error']) {
      head.append(h('th', '', title));
    }
    table.append(h('thead', ''), this._ranks);
    table.tHead!.append(head);
    const [codeSection, codeBody] = section('Code', 'dn-runview-code-section');
    codeBody.append(this._code);
    const [outSection, outBody] = section(
      'Last output of each rank',
      'dn-runview-output-section'
    );
    outBody.append(this._output);
    outSection.open = true;
    this.node.append(
      flags,
      h('h4', 'dn-runview-title', 'Ranks'),
      table,
      codeSection,
      outSection
    );
  }

  render(run: IRunDetailModel, summary: IRunSummary | null): void {
    const key = JSON.stringify([run, summary]);
    if (key === this._shown) {
      return;
    }
    this._shown = key;
    setText(this._flags, run.flags ? run.flags : '(none)');
    setText(this._code, run.code ?? '');
    const measures = new Map<number, IRankSummary>(
      (summary?.ranks ?? []).map(r => [r.rank, r])
    );
    syncChildren(
      this._ranks,
      run.ranks,
      r => String(r.rank),
      r => {
        const row = h('tr', 'dn-runview-rank');
        row.dataset.rank = String(r.rank);
        return row;
      },
      (row, r) => this._rankRow(row, r, measures.get(r.rank))
    );
    const output = run.output ?? {};
    syncChildren(
      this._output,
      Object.keys(output).sort((a, b) => Number(a) - Number(b)),
      rank => rank,
      rank => {
        const block = h('div', 'dn-runview-rank-output');
        block.dataset.rank = rank;
        block.append(h('div', 'dn-runview-label', `rank ${rank}`), h('pre', ''));
        return block;
      },
      (block, rank) => setText(block.lastElementChild!, output[rank])
    );
    if (Object.keys(output).length === 0) {
      setText(this._output, 'No output recorded.');
    }
  }

  private _rankRow(
    row: HTMLElement,
    r: IRunRankModel,
    m: IRankSummary | undefined
  ): void {
    row.dataset.state = r.state;
    row.replaceChildren(...rankCells(r, m).map(text => h('td', '', text)));
  }
}

/**
 * The cells of a rank's row: rank, state, steps, last loss, samples/s, error. Samples/s
 * is written as the chart's bars write it (formatNumber: 1244, 12.3k), so the table and
 * the bar beside it read the same number.
 */
export function rankCells(r: IRunRankModel, m: IRankSummary | undefined): string[] {
  const sps = m?.samples_per_s;
  return [
    String(r.rank),
    r.state,
    m?.steps_done == null ? '–' : String(m.steps_done),
    num(m?.last_loss),
    typeof sps === 'number' && Number.isFinite(sps) ? formatNumber(sps) : '–',
    r.error ?? ''
  ];
}
