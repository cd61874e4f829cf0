/**
 * Ranks grouped by node for the panel's rank table: the ranks come in rank order, which
 * is node order (ranks are numbered by node, then local rank), so a node's ranks are
 * adjacent and its first row carries the node's label.
 */
import type { IRankModel } from './types';

/** The node of a rank: the server's node_rank, else its host (stores before node_rank). */
export function nodeKey(rank: IRankModel): string {
  if (rank.node_rank !== undefined && rank.node_rank !== null) {
    return `n${rank.node_rank}`;
  }
  return `h${rank.host ?? ''}`;
}

/** Per rank: its node's label ("node 1 · h2") on the node's first rank, else ''. */
export function nodeLabels(ranks: readonly IRankModel[]): string[] {
  return ranks.map((rank, i) => {
    if (i > 0 && nodeKey(ranks[i - 1]) === nodeKey(rank)) {
      return '';
    }
    const node =
      rank.node_rank !== undefined && rank.node_rank !== null
        ? `node ${rank.node_rank}`
        : '';
    return [node, rank.host ?? ''].filter(Boolean).join(' · ');
  });
}
