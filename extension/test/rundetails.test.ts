import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { rankRows } from '../src/chart/bars';
import { formatNumber } from '../src/chart/data';
import type { IRunRankModel } from '../src/contracts';
import type { IRankSummary, JsonNumber } from '../src/protocol';
import { rankCells } from '../src/rundetails';

const summary = (sps: JsonNumber | null): IRankSummary =>
  ({
    rank: 0,
    host: 'h',
    steps_done: 40,
    last_loss: 0.123456,
    samples_per_s: sps,
    step_time: 0.04,
    comm_share: 0.5,
    straggler: false
  }) as unknown as IRankSummary;

const done: IRunRankModel = { rank: 0, state: 'done', error: null };

describe('the run tab rank table', () => {
  it('writes samples/s as the bar beside it does (1244, not 1240)', () => {
    for (const sps of [1244.4, 31432, 87.25, 2.5e6]) {
      const cells = rankCells(done, summary(sps));
      const bar = formatNumber(rankRows([summary(sps)])[0].samplesPerS);
      assert.equal(cells[4], bar);
    }
    assert.equal(rankCells(done, summary(1244.4))[4], '1244');
    assert.equal(rankCells(done, summary(31432))[4], '31.4k');
  });

  it('keeps the other cells and a dash for what is not known', () => {
    assert.deepEqual(rankCells(done, summary(1244.4)), [
      '0',
      'done',
      '40',
      '0.123',
      '1244',
      ''
    ]);
    const failed: IRunRankModel = { rank: 1, state: 'failed', error: 'ValueError: x' };
    assert.deepEqual(rankCells(failed, undefined), [
      '1',
      'failed',
      '–',
      '–',
      '–',
      'ValueError: x'
    ]);
    assert.equal(rankCells(done, summary('nan'))[4], '–');
  });
});
