import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { bandOf, bandPath, heatColor, heatOf, mostDeviating } from '../src/chart/band';
import { IPoint } from '../src/chart/data';
import { slowestRows } from '../src/chart/bars';
import { hottest, outsideComm, rgbOf } from '../src/chart/heatmap';

/** *n* steps of rank *rank*: value base + rank offset (time: step, plus a rank skew). */
function curve(rank: number, n: number, value: (step: number) => number): IPoint[] {
  return Array.from({ length: n }, (_, step) => ({
    step,
    time: 1000 + step + 0.01 * rank,
    value: value(step)
  }));
}

function ranks(
  count: number,
  value: (rank: number, step: number) => number,
  n = 20
): Map<number, IPoint[]> {
  return new Map(
    Array.from({ length: count }, (_, r) => [r, curve(r, n, s => value(r, s))])
  );
}

describe('bandOf', () => {
  it('gives the median and min-max across ranks at each step', () => {
    const band = bandOf(
      ranks(16, r => r),
      'step',
      1000,
      null,
      100
    );
    assert.equal(band.points.length, 20, 'one bucket per step: a point of each rank');
    for (const p of band.points) {
      assert.deepEqual([p.lo, p.mid, p.hi], [0, 7.5, 15]);
    }
  });

  it('matches ranks by x, not by step: on a time axis no two ranks share one', () => {
    const band = bandOf(
      ranks(12, (r, s) => s + (r === 5 ? 10 : 0)),
      'time',
      1000,
      null,
      400
    );
    assert.equal(band.points.length, 20);
    assert.deepEqual(
      band.points.map(p => p.hi - p.lo),
      Array(20).fill(10)
    );
  });

  it('names the ranks that stray from the median, the farthest first', () => {
    const series = ranks(
      32,
      (r, s) => 1 / (1 + s) + (r === 9 ? 0.5 : r === 20 ? -0.3 : 0)
    );
    const band = bandOf(series, 'step', 1000, null, 200);
    assert.deepEqual(mostDeviating(band.deviation, 3), [9, 20]);
    assert.deepEqual(mostDeviating(band.deviation, 1), [9]);
  });

  it('names nobody when the ranks spread evenly (the edges are not strays)', () => {
    const band = bandOf(
      ranks(32, (r, s) => 1 / (1 + s) + 0.002 * r),
      'step',
      1000,
      null,
      200
    );
    assert.deepEqual(mostDeviating(band.deviation), []);
  });

  it('names nobody when every rank is the median', () => {
    const band = bandOf(
      ranks(16, (_, s) => s),
      'step',
      1000,
      null,
      200
    );
    assert.deepEqual(mostDeviating(band.deviation), []);
  });

  it('buckets thinned ranks together (envelopes at other steps)', () => {
    const series = ranks(10, (_, s) => s, 200);
    // rank 3 sent as envelopes: every 8th step only
    series.set(
      3,
      series.get(3)!.filter(p => p.step % 8 === 0)
    );
    const band = bandOf(series, 'step', 1000, null, 50);
    assert.equal(band.points.length, 50, 'at most the buckets asked for');
    assert.ok(
      band.points.every(p => p.hi - p.lo <= 4.5),
      'a bucket spans 4 steps'
    );
  });

  it('leaves out gaps and keeps to the zoom', () => {
    const series = ranks(10, (_, s) => (s === 4 ? NaN : s));
    const band = bandOf(series, 'step', 1000, { lo: 2, hi: 9 }, 100);
    assert.ok(band.points.every(p => p.x >= 2 && p.x <= 9));
    assert.ok(band.points.every(p => Number.isFinite(p.mid)));
    assert.equal(bandOf(new Map(), 'step', 0, null, 10).points.length, 0);
  });
});

describe('bandPath', () => {
  it('is a closed area from hi forth and lo back, broken at a gap', () => {
    const id = (v: number): number => v;
    const path = bandPath(
      [
        { x: 0, lo: 1, mid: 2, hi: 3 },
        { x: 1, lo: 1, mid: 2, hi: 4 },
        { x: 2, lo: NaN, mid: NaN, hi: NaN },
        { x: 3, lo: 0, mid: 1, hi: 2 }
      ],
      id,
      id,
      false
    );
    assert.equal(path, 'M0.0 3.0L1.0 4.0L1.0 1.0L0.0 1.0ZM3.0 2.0L3.0 0.0Z');
  });
});

describe('heatOf', () => {
  it('is a row per rank, a slow rank its hottest row', () => {
    const series = ranks(32, r => (r === 17 ? 0.05 : 0.03), 60);
    const heat = heatOf(series, 'step', 1000, null, 200)!;
    assert.equal(heat.ranks.length, 32);
    assert.equal(heat.columns, 60);
    assert.equal(heat.median, 0.03);
    assert.equal(hottest(heat), 17);
    assert.ok(heat.rows[17].every(v => v === 0.05));
    assert.equal(heatOf(new Map(), 'step', 0, null, 10), null);
  });

  it('keeps a thinned rank one line: gaps between its values take the earlier one', () => {
    const series = ranks(12, () => 0.03, 40);
    // rank 5 sent as envelopes: a point every 10 steps, the last at step 30
    series.set(
      5,
      series
        .get(5)!
        .filter(p => p.step % 10 === 0)
        .map(p => ({ ...p, value: 0.09 }))
    );
    const heat = heatOf(series, 'step', 1000, null, 200)!;
    const row = Array.from(heat.rows[5]);
    assert.ok(
      row.slice(0, 31).every(v => v === 0.09),
      'one line from step 0 to 30'
    );
    assert.ok(
      row.slice(31).every(v => Number.isNaN(v)),
      'nothing after its last value'
    );
  });

  it('colours the median pale, slower red, faster blue', () => {
    assert.equal(heatColor(1, 1), 'rgb(236,236,230)');
    assert.equal(heatColor(2, 1), 'rgb(214,39,40)');
    assert.equal(heatColor(8, 1), 'rgb(214,39,40)', 'clipped at twice');
    assert.equal(heatColor(0.5, 1), 'rgb(31,119,180)');
    assert.equal(heatColor(NaN, 1), 'transparent');
  });

  it("takes the theme's neutral for the median (a dark grey on a dark theme)", () => {
    const dark = [66, 66, 66];
    assert.equal(heatColor(1, 1, dark), 'rgb(66,66,66)');
    assert.equal(heatColor(2, 1, dark), 'rgb(214,39,40)');
    assert.equal(heatColor(0.5, 1, dark), 'rgb(31,119,180)');
    // halfway to twice the median: halfway from the dark neutral to red
    assert.equal(heatColor(Math.SQRT2, 1, dark), 'rgb(140,53,53)');
  });

  it('reads a canvas colour back as rgb', () => {
    assert.deepEqual(rgbOf('#424242'), [66, 66, 66]);
    assert.deepEqual(rgbOf('rgba(236, 236, 230, 0.5)'), [236, 236, 230]);
    assert.deepEqual(rgbOf(' rgb(1 2 3)'), [1, 2, 3]);
    assert.equal(rgbOf('transparent'), null);
  });
});

describe('outsideComm', () => {
  it('is step time minus comm time, record by record, never below zero', () => {
    const steps = [
      { step: 0, time: 1, value: 0.04 },
      { step: 1, time: 2, value: 0.04 },
      { step: 2, time: 3, value: 0.01 }
    ];
    const comms = [
      { step: 0, time: 1, value: 0.03 },
      { step: 2, time: 3, value: 0.02 }
    ];
    const out = outsideComm(steps, comms).map(p => Math.round(p.value * 1000));
    assert.deepEqual(out, [10, 40, 0]);
  });
});

describe('slowestRows', () => {
  it('keeps the stragglers and the fewest samples/s, in rank order', () => {
    const rows = Array.from({ length: 16 }, (_, r) => ({
      key: `rank-${r}`,
      label: `rank ${r}`,
      color: 0,
      samplesPerS: r === 3 ? 10 : r === 11 ? 20 : 100 + r,
      stepTime: null,
      commShare: null,
      straggler: r === 14
    }));
    assert.deepEqual(
      slowestRows(rows, 2).map(r => r.key),
      ['rank-3', 'rank-11', 'rank-14']
    );
  });
});
