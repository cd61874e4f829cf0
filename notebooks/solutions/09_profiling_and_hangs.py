# Solutions to the exercises of 09_profiling_and_hangs.ipynb, and plausible wrong answers the checks reject.

# %% straggler
def find_straggler(summaries):
    # the most time spent working, not waiting: step time minus communication
    return max(summaries, key=lambda s: s.compute_time).rank


# %% straggler wrong: the longest step (in lockstep every rank's step is as long)
def find_straggler(summaries):
    return max(summaries, key=lambda s: s.step_time).rank


# %% straggler wrong: the rank that spends the longest in the all-reduce
def find_straggler(summaries):
    return max(summaries, key=lambda s: s.comm_time).rank


# %% straggler wrong: the lowest comm share (ignores step times that differ)
def find_straggler(summaries):
    return min(summaries, key=lambda s: s.comm_share).rank


# %% lagging
def lagging_rank(last_seq):
    return min(last_seq, key=last_seq.get)


# %% lagging wrong: the rank that is furthest ahead (it is the one waiting)
def lagging_rank(last_seq):
    return max(last_seq, key=last_seq.get)


# %% lagging wrong: the smallest rank number rather than the smallest sequence number
def lagging_rank(last_seq):
    return min(last_seq)
