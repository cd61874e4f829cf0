# Solutions of 16_pipeline_schedules.ipynb (see the exercise format in the notebooks' README).
# Every section defines the exercise's function again, as the notebook's cell does:
# ruff: noqa: F811

# %% one_f_one_b
def one_f_one_b(p, rank, m):
    """1F1B on stage `rank` of `p`, `m` micro-batches: the ("F", i) and ("B", i) steps in order."""
    warmup = min(p - rank - 1, m)  # forwards that fill the pipeline: the first stage runs the most
    order = [("F", i) for i in range(warmup)]
    for k in range(m - warmup):  # steady state: one forward, then one backward
        order += [("F", warmup + k), ("B", k)]
    return order + [("B", i) for i in range(m - warmup, m)]  # cool-down: the backwards left


# %% one_f_one_b wrong: GPipe's order passed off as 1F1B (every forward, then every backward)
def one_f_one_b(p, rank, m):
    return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


# %% one_f_one_b wrong: no pipelining: each micro-batch forward and backward before the next
def one_f_one_b(p, rank, m):
    return [step for i in range(m) for step in (("F", i), ("B", i))]


# %% one_f_one_b wrong: the warm-up reversed (rank forwards, the last stage most): deadlocks
def one_f_one_b(p, rank, m):
    warmup = min(rank, m)
    order = [("F", i) for i in range(warmup)]
    for k in range(m - warmup):
        order += [("F", warmup + k), ("B", k)]
    return order + [("B", i) for i in range(m - warmup, m)]


# %% one_f_one_b wrong: a warm-up of p - rank forwards, one too many (p - rank + 1 held)
def one_f_one_b(p, rank, m):
    warmup = min(p - rank, m)
    order = [("F", i) for i in range(warmup)]
    for k in range(m - warmup):
        order += [("F", warmup + k), ("B", k)]
    return order + [("B", i) for i in range(m - warmup, m)]


# %% one_f_one_b wrong: the steady state runs the backward first (the pipeline drains)
def one_f_one_b(p, rank, m):
    warmup = min(p - rank - 1, m)
    order = [("F", i) for i in range(max(warmup, 1))]
    for k in range(m - max(warmup, 1)):
        order += [("B", k), ("F", max(warmup, 1) + k)]
    return order + [("B", i) for i in range(m - max(warmup, 1), m)]


# %% one_f_one_b wrong: the cool-down's backwards in reverse order (the gradients come in order)
def one_f_one_b(p, rank, m):
    warmup = min(p - rank - 1, m)
    order = [("F", i) for i in range(warmup)]
    for k in range(m - warmup):
        order += [("F", warmup + k), ("B", k)]
    return order + [("B", i) for i in reversed(range(m - warmup, m))]


# %% one_f_one_b right: greedy: a forward while fewer than p - rank are held, else a backward
def one_f_one_b(p, rank, m):
    order, forwards, backwards = [], 0, 0
    while backwards < m:
        if forwards < m and forwards - backwards < p - rank:
            order.append(("F", forwards))
            forwards += 1
        else:
            order.append(("B", backwards))
            backwards += 1
    return order
