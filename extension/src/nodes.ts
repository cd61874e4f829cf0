/**
 * Ranks grouped by node for the panel's rank table: the ranks come in rank order, which
 * is node order (ranks are numbered by node, then local rank), so a node's ranks are
 * adjacent and its first row carries the node's label.
 */
import type { IRankModel } from './contracts';

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

/** Ranks beyond which the panel's cluster card has a row per node (as the magic's status). */
export const BY_NODE_BEYOND = 8;

/** Ranks written compactly, as the magics do: "0-7,9,12-15" (a pair is not a range). */
export function rankSet(ranks: Iterable<number>): string {
  const sorted = [...new Set(ranks)].sort((a, b) => a - b);
  const parts: string[] = [];
  let i = 0;
  while (i < sorted.length) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) {
      j += 1;
    }
    if (j - i >= 2) {
      parts.push(`${sorted[i]}-${sorted[j]}`);
    } else {
      parts.push(...sorted.slice(i, j + 1).map(String));
    }
    i = j + 1;
  }
  return parts.join(',');
}

/** "1 dead, 7 idle": how many ranks are in each state, the rarest first. */
export function stateCounts(states: Iterable<string>): string {
  const counts = new Map<string, number>();
  for (const s of states) {
    counts.set(s, (counts.get(s) ?? 0) + 1);
  }
  return [...counts.entries()]
    .sort((a, b) => a[1] - b[1] || a[0].localeCompare(b[0]))
    .map(([s, n]) => `${n} ${s}`)
    .join(', ');
}

/** A node of a cluster card beyond BY_NODE_BEYOND ranks. */
export interface INodeGroup {
  key: string;
  label: string;
  ranks: number[];
  states: string;
  /** The rank the others wait for most in the run going (the summary's), or null. */
  slowest: number | null;
  /** Whether a rank of the node is the summary's straggler. */
  straggler: boolean;
}

/**
 * What nodeGroups reads of a run's summary per rank (an IRankSummary): how long the
 * others wait for the rank each step, else its time outside the all-reduce (named
 * compute_time in summaries of before).
 */
export interface IRankTime {
  rank: number;
  straggler: boolean;
  others_wait?: number | string | null;
  outside_comm_time?: number | string | null;
  compute_time?: number | string | null;
}

export type TimeField = 'others_wait' | 'outside_comm_time' | 'compute_time';

function finiteTime(v: number | string | null | undefined): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

/** The field nodeGroups ranks by: the first of IRankTime's any rank has (one for all). */
export function slowField(stats: readonly IRankTime[]): TimeField | null {
  const fields: TimeField[] = ['others_wait', 'outside_comm_time', 'compute_time'];
  return fields.find(f => stats.some(s => finiteTime(s[f]) !== null)) ?? null;
}

/** The ranks grouped by node, in node order, with the run's slowest rank of each. */
export function nodeGroups(
  ranks: readonly IRankModel[],
  stats: readonly IRankTime[] = []
): INodeGroup[] {
  const byRank = new Map(stats.map(s => [s.rank, s]));
  const field = slowField(stats);
  const groups = new Map<string, IRankModel[]>();
  for (const r of ranks) {
    const key = nodeKey(r);
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }
  const labels = nodeLabels(ranks);
  const labelOf = new Map(ranks.map((r, i) => [r.rank, labels[i]]));
  return [...groups.entries()].map(([key, members]) => {
    let slowest: number | null = null;
    let top = -Infinity;
    let low = Infinity;
    for (const m of members) {
      const t = field === null ? null : finiteTime(byRank.get(m.rank)?.[field]);
      if (t !== null && t > top) {
        top = t;
        slowest = m.rank;
      }
      low = t === null ? low : Math.min(low, t);
    }
    // Ranks all alike (lockstep, none waited for): no rank is the slowest.
    if (members.length > 1 && top === low) {
      slowest = null;
    }
    return {
      key,
      label: labelOf.get(members[0].rank) || key,
      ranks: members.map(m => m.rank),
      states: stateCounts(members.map(m => m.state)),
      slowest,
      straggler: members.some(m => byRank.get(m.rank)?.straggler === true)
    };
  });
}
