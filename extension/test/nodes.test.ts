import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { nodeGroups, nodeLabels, rankSet, stateCounts } from '../src/nodes';
import type { IRankModel } from '../src/contracts';

function rank(r: number, host: string, node: number | null): IRankModel {
  return {
    rank: r,
    host,
    pid: 100 + r,
    device: 'cpu',
    state: 'idle',
    engine_id: r,
    node_rank: node
  };
}

describe('nodeLabels', () => {
  it('labels the first rank of each node', () => {
    const ranks = [rank(0, 'h1', 0), rank(1, 'h1', 0), rank(2, 'h2', 1)];
    assert.deepEqual(nodeLabels(ranks), ['node 0 · h1', '', 'node 1 · h2']);
  });

  it('groups by host when the store has no node (before schema 3)', () => {
    const ranks = [rank(0, 'a', null), rank(1, 'b', null), rank(2, 'b', null)];
    assert.deepEqual(nodeLabels(ranks), ['a', 'b', '']);
  });
});

describe('node summary', () => {
  it('writes ranks compactly and counts states, the rarest first', () => {
    assert.equal(rankSet([0, 1, 2, 3, 5, 8, 9, 10, 11]), '0-3,5,8-11');
    assert.equal(rankSet([7, 1, 0, 1]), '0,1,7');
    assert.equal(
      stateCounts(['idle', 'busy', 'idle', 'dead', 'idle', 'busy']),
      '1 dead, 2 busy, 3 idle'
    );
  });

  it('is a row per node with its ranks, states and slowest rank', () => {
    const ranks = Array.from({ length: 32 }, (_, r) => ({
      ...rank(r, `h${r >> 3}`, r >> 3),
      state: (r === 13 ? 'dead' : 'busy') as IRankModel['state']
    }));
    const stats = ranks.map(r => ({
      rank: r.rank,
      compute_time: r.rank === 13 ? null : r.rank === 21 ? 0.05 : 0.01 + r.rank * 1e-4,
      straggler: r.rank === 21
    }));
    const groups = nodeGroups(ranks, stats);
    assert.deepEqual(
      groups.map(g => [g.label, rankSet(g.ranks), g.states, g.slowest, g.straggler]),
      [
        ['node 0 · h0', '0-7', '8 busy', 7, false],
        ['node 1 · h1', '8-15', '1 dead, 7 busy', 15, false],
        ['node 2 · h2', '16-23', '8 busy', 21, true],
        ['node 3 · h3', '24-31', '8 busy', 31, false]
      ]
    );
    assert.deepEqual(
      nodeGroups(ranks.slice(0, 2)).map(g => g.slowest),
      [null],
      'no run: no slowest rank'
    );
    const alike = stats.map(s => ({ ...s, compute_time: 0.01 }));
    assert.deepEqual(
      nodeGroups(ranks, alike).map(g => g.slowest),
      [null, null, null, null],
      'ranks all alike: none is the slowest'
    );
  });
});
