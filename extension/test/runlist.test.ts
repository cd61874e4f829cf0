import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { filterRuns, IRunFilter, meanPerStep } from '../src/runs';
import type { IRunModel, ISeqRecord } from '../src/contracts';

const DAY = 86400;
const T0 = new Date('2026-11-01T00:00').getTime() / 1000;

function run(
  id: string,
  name: string,
  state: IRunModel['state'],
  cluster: string,
  day: number
): IRunModel {
  return {
    id,
    name,
    cluster_id: cluster,
    state,
    started: T0 + day * DAY,
    ended: null,
    steps: null,
    error: null
  };
}

const RUNS = [
  run('a1', 'digits-lr0.1', 'succeeded', 'c1', 0),
  run('a2', 'digits-lr0.3', 'failed', 'c1', 3),
  run('b1', 'mlp', 'orphaned', 'c2', 10),
  run('b2', 'mlp-long', 'running', 'c2', 20)
];
const ALL: IRunFilter = { text: '', state: '', cluster: '', since: '' };

describe('run filters', () => {
  it('keeps everything with no filter', () => {
    assert.equal(filterRuns(RUNS, ALL).length, 4);
  });
  it('searches names (any case) and id prefixes', () => {
    assert.deepEqual(
      filterRuns(RUNS, { ...ALL, text: 'DIGITS' }).map(r => r.id),
      ['a1', 'a2']
    );
    assert.deepEqual(
      filterRuns(RUNS, { ...ALL, text: 'b2' }).map(r => r.id),
      ['b2']
    );
  });
  it('filters by state, cluster and start day, together', () => {
    assert.deepEqual(
      filterRuns(RUNS, { ...ALL, state: 'orphaned' }).map(r => r.id),
      ['b1']
    );
    assert.deepEqual(
      filterRuns(RUNS, { ...ALL, cluster: 'c2' }).map(r => r.id),
      ['b1', 'b2']
    );
    assert.deepEqual(
      filterRuns(RUNS, { ...ALL, since: '2026-11-04' }).map(r => r.id),
      ['a2', 'b1', 'b2']
    );
    assert.deepEqual(
      filterRuns(RUNS, {
        text: 'mlp',
        state: 'running',
        cluster: 'c2',
        since: '2026-11-05'
      }).map(r => r.id),
      ['b2']
    );
  });
});

function rec(
  seq: number,
  rank: number,
  step: number,
  loss: number | 'nan'
): ISeqRecord {
  return {
    seq,
    rank,
    step,
    time: 100 + step,
    step_time: 0.1,
    comm_time: null,
    samples: 8,
    gpu: null,
    metrics: { loss }
  };
}

describe('overlay', () => {
  it('is the mean over ranks per step, as the series of the run', () => {
    const out = meanPerStep(
      [rec(1, 0, 0, 1), rec(2, 1, 0, 3), rec(3, 0, 1, 2), rec(4, 1, 1, 'nan')],
      5
    );
    assert.deepEqual(
      out.map(r => [r.rank, r.step, r.metrics.loss]),
      [
        [5, 0, 2],
        [5, 1, 2]
      ]
    );
    assert.equal(out[0].samples, 8);
  });
});
