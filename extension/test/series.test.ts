import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { formatBytes, formatNumber, RunSeries } from '../src/series';
import type { IMetricRecord } from '../src/series';

function rec(
  seq: number,
  rank: number,
  step: number,
  extra: object = {}
): IMetricRecord {
  return { seq, rank, step, time: 100 + step, ...extra };
}

describe('RunSeries', () => {
  it('groups records per rank and remembers the last sequence number', () => {
    const s = new RunSeries('r');
    assert.equal(
      s.add([rec(1, 0, 0, { loss: 2 }), rec(2, 1, 0, { loss: 3 })], 2),
      true
    );
    assert.equal(s.add([rec(3, 0, 1, { loss: 1 })], 3), true);
    assert.deepEqual(s.ranks, [0, 1]);
    assert.deepEqual(s.curve(0), [
      { step: 0, value: 2 },
      { step: 1, value: 1 }
    ]);
    assert.equal(s.lastSeq, 3);
  });

  it('ignores records it already has', () => {
    const s = new RunSeries('r');
    s.add([rec(1, 0, 0, { loss: 2 }), rec(2, 0, 1, { loss: 1 })]);
    assert.equal(s.add([rec(2, 0, 1, { loss: 1 })]), false);
    assert.equal(s.curve(0).length, 2);
  });

  it('moves lastSeq on with an empty page', () => {
    const s = new RunSeries('r');
    assert.equal(s.add([], 9), false);
    assert.equal(s.lastSeq, 9);
  });

  it('derives no measure: samples/s and stragglers come from the server', () => {
    const s = new RunSeries('r');
    s.add([
      { seq: 1, rank: 0, step: 0, time: 10, samples: 32 },
      { seq: 2, rank: 0, step: 1, time: 10.5, samples: 32 }
    ]);
    assert.deepEqual(s.metrics, ['samples']);
    assert.deepEqual(s.curve(0, 'samples_per_s'), []);
  });

  it('lists metrics with loss first', () => {
    const s = new RunSeries('r');
    s.add([rec(1, 0, 0, { step_time: 0.1, loss: 1, comm_share: 0.2, note: 'x' })]);
    assert.deepEqual(s.metrics, ['loss', 'comm_share', 'step_time']);
  });
});

describe('formatting', () => {
  it('formats numbers and bytes', () => {
    assert.equal(formatNumber(null), '–');
    assert.equal(formatNumber(320), '320');
    assert.equal(formatNumber(0.1234), '0.123');
    assert.equal(formatNumber(12345), '12.3k');
    assert.equal(formatBytes(512), '512 B');
    assert.equal(formatBytes(3 * 1024 ** 3), '3.0 GiB');
  });
});
