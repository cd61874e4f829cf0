import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  extentOf,
  formatBytes,
  formatNumber,
  linePath,
  RunSeries,
  thin
} from '../src/series';
import type { IMetricRecord } from '../src/types';

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

describe('curve geometry', () => {
  it('spans all points and widens flat extents', () => {
    assert.equal(extentOf([[]]), null);
    assert.deepEqual(
      extentOf([
        [
          { step: 0, value: 1 },
          { step: 4, value: 3 }
        ],
        [{ step: 2, value: 0.5 }]
      ]),
      { x0: 0, x1: 4, y0: 0.5, y1: 3 }
    );
    const flat = extentOf([[{ step: 3, value: 2 }]])!;
    assert.ok(flat.x1 > flat.x0 && flat.y1 > flat.y0);
  });

  it('maps the extent onto the box with y downwards', () => {
    const points = [
      { step: 0, value: 0 },
      { step: 10, value: 1 }
    ];
    assert.equal(
      linePath(points, { x0: 0, x1: 10, y0: 0, y1: 1 }, 100, 50),
      'M0.0 50.0L100.0 0.0'
    );
  });

  it('thins long curves and keeps the last point', () => {
    const points = Array.from({ length: 1000 }, (_, i) => ({ step: i, value: i }));
    const few = thin(points, 100);
    assert.ok(few.length <= 101);
    assert.equal(few[few.length - 1].step, 999);
    assert.equal(thin(points.slice(0, 5), 100).length, 5);
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
