import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { nodeLabels } from '../src/nodes';
import type { IRankModel } from '../src/types';

function rank(r: number, host: string, node: number | null | undefined): IRankModel {
  return { rank: r, host, pid: 100 + r, device: 'cpu', state: 'idle', node_rank: node };
}

describe('nodeLabels', () => {
  it('labels the first rank of each node', () => {
    const ranks = [rank(0, 'h1', 0), rank(1, 'h1', 0), rank(2, 'h2', 1)];
    assert.deepEqual(nodeLabels(ranks), ['node 0 · h1', '', 'node 1 · h2']);
  });

  it('groups by host when the store has no node (before schema 3)', () => {
    const ranks = [rank(0, 'a', null), rank(1, 'b', undefined), rank(2, 'b', null)];
    assert.deepEqual(nodeLabels(ranks), ['a', 'b', '']);
  });
});
