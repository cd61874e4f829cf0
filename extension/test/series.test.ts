import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { ISeqRecord } from '../src/contracts';
import { formatBytes, RunSeries } from '../src/series';

function rec(seq: number, rank: number, step: number, loss: number): ISeqRecord {
  return {
    seq,
    rank,
    step,
    time: 100 + step,
    step_time: null,
    comm_time: null,
    samples: null,
    metrics: { loss },
    gpu: null
  };
}

describe('RunSeries', () => {
  it('keeps the records in sequence order and remembers the last sequence number', () => {
    const s = new RunSeries('r');
    assert.equal(s.add([rec(1, 0, 0, 2), rec(2, 1, 0, 3)], 2), true);
    assert.equal(s.add([rec(3, 0, 1, 1)], 3), true);
    assert.deepEqual(
      s.records.map(r => [r.seq, r.rank, r.metrics.loss]),
      [
        [1, 0, 2],
        [2, 1, 3],
        [3, 0, 1]
      ]
    );
    assert.equal(s.lastSeq, 3);
  });

  it('ignores records it already has', () => {
    const s = new RunSeries('r');
    s.add([rec(1, 0, 0, 2), rec(2, 0, 1, 1)]);
    assert.equal(s.add([rec(2, 0, 1, 1)]), false);
    assert.equal(s.records.length, 2);
  });

  it('moves lastSeq on with an empty page', () => {
    const s = new RunSeries('r');
    assert.equal(s.add([], 9), false);
    assert.equal(s.lastSeq, 9);
  });
});

describe('formatting', () => {
  it('formats bytes in powers of 1024', () => {
    assert.equal(formatBytes(null), '–');
    assert.equal(formatBytes(512), '512 B');
    assert.equal(formatBytes(3 * 1024 ** 3), '3.0 GiB');
  });
});
