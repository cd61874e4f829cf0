import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { barWidth, formatBytes, hostRows, rankRows } from '../src/chart/bars';
import {
  ChartData,
  colorIndex,
  downsample,
  extentOf,
  formatNumber,
  IPoint,
  linePath,
  meanOf,
  nearest,
  scale,
  smooth,
  tickFormat,
  ticks,
  toNumber
} from '../src/chart/data';
import type { IRankSummary, IRecord, JsonNumber } from '../src/protocol';

function rec(
  rank: number,
  step: number,
  metrics: { [name: string]: JsonNumber | null } = {},
  extra: Partial<IRecord> = {}
): IRecord {
  return {
    rank,
    step,
    time: 100 + step,
    step_time: null,
    comm_time: null,
    samples: null,
    metrics,
    gpu: null,
    ...extra
  };
}

const pts = (values: number[]): IPoint[] =>
  values.map((value, i) => ({ step: i, time: 100 + i, value }));

describe('ChartData', () => {
  it('keeps user metrics apart from system fields, whatever their names', () => {
    const d = new ChartData();
    d.add([
      rec(0, 0, { loss: 2, step_time: 7, rank: 5 }, { step_time: 0.1, samples: 32 })
    ]);
    assert.deepEqual(d.ranks, [0], 'a metric named rank files nothing under rank 5');
    assert.deepEqual(d.metrics, [
      'loss',
      'rank',
      'step_time',
      'system:step_time',
      'system:samples'
    ]);
    assert.equal(d.series(0, 'step_time')[0].value, 7);
    assert.equal(d.series(0, 'system:step_time')[0].value, 0.1);
  });

  it('reads non-finite values as gaps and null as no value', () => {
    assert.ok(Number.isNaN(toNumber('nan')));
    assert.equal(toNumber('inf'), Infinity);
    assert.equal(toNumber('-inf'), -Infinity);
    assert.equal(toNumber(null), null);
    const d = new ChartData();
    d.add([rec(0, 0, { loss: 'nan', acc: null }), rec(0, 1, { loss: 1 })]);
    assert.equal(d.series(0, 'loss').length, 2);
    assert.equal(d.series(0, 'acc').length, 0);
  });

  it('drops records older than a rank has (a history sent again)', () => {
    const d = new ChartData();
    assert.equal(d.add([rec(0, 0, { loss: 1 }), rec(0, 1, { loss: 2 })]), 2);
    const v = d.version;
    assert.equal(d.add([rec(0, 0, { loss: 1 }), rec(0, 1, { loss: 2 })]), 0);
    assert.equal(d.version, v, 'nothing new: no redraw');
    assert.equal(d.add([rec(0, 2, { loss: 3 })]), 1);
    assert.equal(d.count(0), 3);
  });

  it('takes the mean at the steps every rank reported', () => {
    const d = new ChartData();
    d.add([rec(0, 0, { loss: 1 }), rec(1, 0, { loss: 3 }), rec(0, 1, { loss: 5 })]);
    assert.deepEqual(
      d.mean('loss').map(p => [p.step, p.value]),
      [[0, 2]]
    );
    assert.deepEqual(meanOf([]), []);
  });

  it('holds 10^5 records and draws them as a few points per pixel', () => {
    const d = new ChartData();
    const batch: IRecord[] = [];
    for (let i = 0; i < 100_000; i++) {
      batch.push(rec(i % 2, i >> 1, { loss: Math.sin(i) + (i === 5001 ? 50 : 0) }));
    }
    d.add(batch);
    const shown = downsample(d.series(1, 'loss'), 500, 'step', d.t0 ?? 0);
    assert.ok(shown.length <= 1001 && shown.length > 500, String(shown.length));
    assert.ok(
      shown.some(p => p.value > 40),
      'a spike survives downsampling'
    );
  });
});

describe('drawing helpers', () => {
  it('smooths with the start-up bias removed, gaps kept', () => {
    const s = smooth(pts([1, 1, NaN, 1]), 0.9);
    assert.equal(s[0].value, 1);
    assert.ok(Number.isNaN(s[2].value));
    assert.ok(Math.abs(s[3].value - 1) < 1e-12);
    assert.equal(smooth(pts([1, 2]), 0)[1].value, 2);
  });

  it('downsamples to min and max per bucket, keeping gaps and the last point', () => {
    const values = Array.from({ length: 100 }, (_, i) => (i === 37 ? NaN : i % 10));
    const out = downsample(pts(values), 10, 'step', 100);
    assert.ok(out.length <= 31);
    assert.ok(out.some(p => Number.isNaN(p.value)));
    assert.equal(out[out.length - 1].step, 99);
    assert.deepEqual(
      downsample(pts([1, 2, 3, 4]), 10, 'step', 0, { lo: 1, hi: 2 }).map(p => p.step),
      [1, 2]
    );
  });

  it('spans drawable values only; log scales skip values <= 0', () => {
    const e = extentOf([pts([0, 10, NaN, Infinity, 20])], 'step', 100, true)!;
    assert.equal(e.y.lo, 10);
    assert.equal(e.x.lo, 1);
    const lin = extentOf([pts([0, 10])], 'time', 100, false)!;
    assert.equal(lin.x.lo, 0);
    assert.ok(lin.y.lo < 0 && lin.y.hi > 10, 'a margin above and below');
    assert.equal(extentOf([pts([NaN])], 'step', 0, false), null);
  });

  it('breaks the path at gaps and maps log values', () => {
    const sx = scale({ lo: 0, hi: 3 }, 0, 300);
    const sy = scale({ lo: 1, hi: 100 }, 100, 0, true);
    assert.equal(sy(10), 50);
    const d = linePath(pts([1, 10, NaN, 100]), sx, sy, 'step', 100, true);
    assert.equal(d, 'M0.0 100.0L100.0 50.0M300.0 0.0');
  });

  it('makes round ticks, and powers of ten on log axes', () => {
    assert.deepEqual(ticks({ lo: 0, hi: 10 }, 5), [0, 2, 4, 6, 8, 10]);
    assert.deepEqual(ticks({ lo: 0.5, hi: 2000 }, 4, true), [1, 10, 100, 1000]);
  });

  it('labels at least 3 ticks on narrow linear and log ranges', () => {
    // the ranges that showed one label: an accuracy, a log loss of 1.3-2.5
    const acc = ticks({ lo: 0.06, hi: 0.84 }, 4);
    assert.ok(acc.length >= 3, String(acc));
    const logLoss = ticks({ lo: 1.3, hi: 2.5 }, 4, true);
    assert.ok(logLoss.length >= 3, String(logLoss));
    assert.ok(
      logLoss.every(v => v >= 1.3 && v <= 2.5),
      String(logLoss)
    );
    for (const [lo, hi] of [
      [0.98, 1.02],
      [3, 7],
      [1e-5, 3e-5],
      [100, 140]
    ]) {
      for (const log of [false, true]) {
        const t = ticks({ lo, hi }, 4, log);
        assert.ok(t.length >= 3, `${lo}-${hi} log=${log}: ${t}`);
      }
    }
  });

  it('formats one axis with one format', () => {
    const f = tickFormat([0, 0.5, 1]);
    assert.deepEqual([0, 0.5, 1].map(f), ['0.0', '0.5', '1.0']);
    const g = tickFormat([1.4, 1.6, 1.8]);
    assert.deepEqual([1.4, 1.6, 1.8].map(g), ['1.4', '1.6', '1.8']);
    const k = tickFormat([20000, 40000]);
    assert.deepEqual([20000, 40000].map(k), ['20k', '40k']);
    const tiny = tickFormat([1e-5, 2e-5, 3e-5]);
    assert.deepEqual([1e-5, 3e-5].map(tiny), ['1e-5', '3e-5']);
    const decades = tickFormat([0.01, 0.1, 1]);
    assert.deepEqual([0.01, 0.1, 1].map(decades), ['0.01', '0.10', '1.00']);
  });

  it('finds the nearest point by x', () => {
    assert.equal(nearest(pts([5, 6, 7]), 1.4, 'step', 100)?.value, 6);
    assert.equal(nearest(pts([5, 6, 7]), 102.6, 'time', 0)?.value, 7);
    assert.equal(nearest([], 1, 'step', 0), null);
  });

  it('gives every rank one colour slot', () => {
    assert.equal(colorIndex(3), 3);
    assert.equal(colorIndex(11), 3);
  });

  it('formats numbers', () => {
    assert.equal(formatNumber(31432), '31.4k');
    assert.equal(formatNumber(0.00012), '1.2e-4');
    assert.equal(formatNumber(NaN), 'NaN');
    assert.equal(formatNumber(null), '–');
  });
});

describe('bars', () => {
  const rank = (r: number, sps: JsonNumber | null, straggler = false): IRankSummary =>
    ({
      rank: r,
      host: 'h',
      samples_per_s: sps,
      step_time: 0.04,
      comm_share: 0.5,
      straggler
    }) as unknown as IRankSummary;

  it('carries peak memory and starved ranks, in bytes as the end table', () => {
    const starved = {
      ...rank(1, 50),
      starved: true,
      peak_mem: 1.43e9
    } as unknown as IRankSummary;
    const rows = rankRows([rank(0, 100), starved]);
    assert.deepEqual(
      rows.map(r => [r.straggler, r.starved, r.peakMem]),
      [
        [false, false, null],
        [false, true, 1.43e9]
      ]
    );
    assert.equal(formatBytes(1.43e9), '1.43 GB');
    assert.equal(formatBytes(812e6), '812 MB');
    assert.equal(formatBytes(512), '512 B');
    assert.equal(formatBytes(null), '');
  });

  it("shows the summary's numbers, never recomputed", () => {
    const rows = rankRows([rank(0, 100), rank(1, 'nan', true)]);
    assert.deepEqual(
      rows.map(r => [r.label, r.samplesPerS, r.straggler, r.color]),
      [
        ['rank 0', 100, false, 0],
        ['rank 1', NaN, true, 1]
      ]
    );
    assert.equal(rows[0].stepTime, 0.04);
    const hosts = hostRows([
      {
        host: 'a',
        ranks: [0, 1],
        samples_per_s: 300,
        outside_comm_time: 0.1,
        straggler: true
      }
    ]);
    assert.equal(hosts[0].label, 'a (2)');
    assert.equal(hosts[0].straggler, true);
  });

  it('sizes bars against the widest, a gap as empty', () => {
    assert.equal(barWidth(50, 200), 25);
    assert.equal(barWidth(NaN, 200), 0);
    assert.equal(barWidth(null, 200), 0);
    assert.equal(barWidth(10, 0), 0);
  });
});
