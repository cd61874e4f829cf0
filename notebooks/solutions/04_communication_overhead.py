# Solutions of 04_communication_overhead.ipynb (see testbed/exercises.py for the format).

# %% no-sync
%%dist
def accumulate_no_sync(model):
    pairs = list(zip(micro_x, micro_t))
    with model.no_sync():  # local accumulation only: no all-reduce
        for xb, tb in pairs[:-1]:
            (nn.functional.mse_loss(model(xb), tb) / micro).backward()
    xb, tb = pairs[-1]  # this backward all-reduces the accumulated sum
    (nn.functional.mse_loss(model(xb), tb) / micro).backward()

# %% no-sync wrong: every micro-batch inside no_sync: nothing is ever all-reduced
%%dist
def accumulate_no_sync(model):
    with model.no_sync():
        for xb, tb in zip(micro_x, micro_t):
            (nn.functional.mse_loss(model(xb), tb) / micro).backward()

# %% no-sync wrong: no no_sync at all: right gradients, but an all-reduce per micro-batch
%%dist
def accumulate_no_sync(model):
    for xb, tb in zip(micro_x, micro_t):
        (nn.functional.mse_loss(model(xb), tb) / micro).backward()

# %% no-sync wrong: losses not divided by micro: the sum of the micro-batch means, micro times too big
%%dist
def accumulate_no_sync(model):
    pairs = list(zip(micro_x, micro_t))
    with model.no_sync():
        for xb, tb in pairs[:-1]:
            nn.functional.mse_loss(model(xb), tb).backward()
    xb, tb = pairs[-1]
    nn.functional.mse_loss(model(xb), tb).backward()

# %% straggler
def find_straggler(summaries):
    """The rank the others wait for, from the per-rank summaries."""
    known = [s for s in summaries if s.outside_comm_time is not None]
    return max(known, key=lambda s: s.outside_comm_time).rank

# %% straggler wrong: the longest step time: in lockstep every rank's is the same, noise decides
def find_straggler(summaries):
    known = [s for s in summaries if s.step_time is not None]
    return max(known, key=lambda s: s.step_time).rank

# %% straggler wrong: the lowest samples/s: equal in lockstep too
def find_straggler(summaries):
    known = [s for s in summaries if s.samples_per_s is not None]
    return min(known, key=lambda s: s.samples_per_s).rank

# %% straggler wrong: the highest comm share, which is a rank waiting for the straggler
def find_straggler(summaries):
    known = [s for s in summaries if s.comm_share is not None]
    return max(known, key=lambda s: s.comm_share).rank

# %% straggler wrong: the position in the list, not the rank
def find_straggler(summaries):
    times = [s.outside_comm_time if s.outside_comm_time is not None else -1.0 for s in summaries]
    return times.index(max(times))
