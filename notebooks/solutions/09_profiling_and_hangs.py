# Solutions to the exercises of 09_profiling_and_hangs.ipynb, and plausible wrong answers the checks reject.

# %% lagging
def lagging_rank(last_seq):
    return min(last_seq, key=last_seq.get)


# %% lagging wrong: the rank that is furthest ahead (it is the one waiting)
def lagging_rank(last_seq):
    return max(last_seq, key=last_seq.get)


# %% lagging wrong: the smallest rank number rather than the smallest sequence number
def lagging_rank(last_seq):
    return min(last_seq)


# %% mismatch
from collections import Counter


def first_mismatch(records):
    seqs = sorted({seq for entries in records.values() for seq, _, _ in entries})
    by_rank = {r: {seq: (op, repr(sizes)) for seq, op, sizes in entries} for r, entries in records.items()}
    for seq in seqs:
        missing = [r for r in records if seq not in by_rank[r]]
        if missing:
            return seq, missing[0]  # never got there
        calls = {r: by_rank[r][seq] for r in records}
        usual, _ = Counter(calls.values()).most_common(1)[0]
        odd = [r for r, call in calls.items() if call != usual]
        if odd:
            return seq, odd[0]
    return None


# %% mismatch wrong: only the operation names compared (an all-reduce of another size passes)
from collections import Counter


def first_mismatch(records):
    seqs = sorted({seq for entries in records.values() for seq, _, _ in entries})
    by_rank = {r: {seq: op for seq, op, _ in entries} for r, entries in records.items()}
    for seq in seqs:
        missing = [r for r in records if seq not in by_rank[r]]
        if missing:
            return seq, missing[0]
        usual, _ = Counter(by_rank[r][seq] for r in records).most_common(1)[0]
        odd = [r for r in records if by_rank[r][seq] != usual]
        if odd:
            return seq, odd[0]
    return None


# %% mismatch wrong: every rank compared with rank 0 (when rank 0 is the odd one, rank 1 is named)
def first_mismatch(records):
    seqs = sorted({seq for entries in records.values() for seq, _, _ in entries})
    by_rank = {r: {seq: (op, repr(sizes)) for seq, op, sizes in entries} for r, entries in records.items()}
    first = min(records)
    for seq in seqs:
        for r in sorted(records):
            if seq not in by_rank[r]:
                return seq, r
            if by_rank[r][seq] != by_rank[first].get(seq):
                return seq, r
    return None


# %% mismatch wrong: the rank with the fewest records, at its last one (the rule for a skipped collective)
def first_mismatch(records):
    r = min(records, key=lambda k: len(records[k]))
    return max(seq for seq, _, _ in records[r]) + 1, r
