# Solutions of notebook 12 (find a training configuration). Each section replaces the
# exercise cell it names; "wrong:" sections are plausible mistakes the check must reject.

# %% plan
def plan(memory, budget, global_batch):
    """{config: (micro_batch, accumulation, checkpointing) or None}."""
    plans = {}
    for config, m in memory.items():
        share = global_batch // m["dp_degree"]  # sequences per data-parallel group per step
        plans[config] = None
        if global_batch % m["dp_degree"]:
            continue
        for checkpointing in (False, True):  # recompute only where it buys a larger micro-batch
            per = m["per_sample_ckpt"] if checkpointing else m["per_sample"]
            fits = [
                b
                for b in range(1, share + 1)
                if share % b == 0 and m["state"] + m["transient"] + b * per <= budget
            ]
            if fits and (plans[config] is None or max(fits) > plans[config][0]):
                plans[config] = (max(fits), share // max(fits), checkpointing)
    return plans


# %% plan wrong: the state and the activations only: the buckets and the gathered units are forgotten
def plan(memory, budget, global_batch):
    plans = {}
    for config, m in memory.items():
        share = global_batch // m["dp_degree"]
        plans[config] = None
        for checkpointing in (False, True):
            per = m["per_sample_ckpt"] if checkpointing else m["per_sample"]
            fits = [b for b in range(1, share + 1) if share % b == 0 and m["state"] + b * per <= budget]
            if fits and (plans[config] is None or max(fits) > plans[config][0]):
                plans[config] = (max(fits), share // max(fits), checkpointing)
    return plans


# %% plan wrong: only the activations count against the budget (the state is forgotten)
def plan(memory, budget, global_batch):
    plans = {}
    for config, m in memory.items():
        share = global_batch // m["dp_degree"]
        plans[config] = None
        for checkpointing in (False, True):
            per = m["per_sample_ckpt"] if checkpointing else m["per_sample"]
            fits = [b for b in range(1, share + 1) if share % b == 0 and b * per <= budget]
            if fits and (plans[config] is None or max(fits) > plans[config][0]):
                plans[config] = (max(fits), share // max(fits), checkpointing)
    return plans


# %% plan wrong: checkpointing never considered (the lever is missed)
def plan(memory, budget, global_batch):
    plans = {}
    for config, m in memory.items():
        share = global_batch // m["dp_degree"]
        need = m["state"] + m["transient"]
        fits = [b for b in range(1, share + 1) if share % b == 0 and need + b * m["per_sample"] <= budget]
        plans[config] = (max(fits), share // max(fits), False) if fits else None
    return plans


# %% plan wrong: checkpointing always, also where the micro-batch fits without it (a forward per block for nothing)
def plan(memory, budget, global_batch):
    plans = {}
    for config, m in memory.items():
        share = global_batch // m["dp_degree"]
        need = m["state"] + m["transient"]
        fits = [b for b in range(1, share + 1) if share % b == 0 and need + b * m["per_sample_ckpt"] <= budget]
        plans[config] = (max(fits), share // max(fits), True) if fits else None
    return plans


# %% plan wrong: the largest micro-batch that fits, rounded up accumulation (global batch missed)
def plan(memory, budget, global_batch):
    plans = {}
    for config, m in memory.items():
        share = global_batch // m["dp_degree"]
        plans[config] = None
        for checkpointing in (False, True):
            per = m["per_sample_ckpt"] if checkpointing else m["per_sample"]
            b = min(share, (budget - m["state"] - m["transient"]) // per)
            if b >= 1 and (plans[config] is None or b > plans[config][0]):
                plans[config] = (b, -(-share // b), checkpointing)
    return plans


# %% plan wrong: every rank is its own data-parallel group (4 ranks), also under tensor parallelism
def plan(memory, budget, global_batch):
    plans = {}
    for config, m in memory.items():
        share = global_batch // 4
        plans[config] = None
        for checkpointing in (False, True):
            per = m["per_sample_ckpt"] if checkpointing else m["per_sample"]
            fits = [
                b
                for b in range(1, share + 1)
                if share % b == 0 and m["state"] + m["transient"] + b * per <= budget
            ]
            if fits and (plans[config] is None or max(fits) > plans[config][0]):
                plans[config] = (max(fits), share // max(fits), checkpointing)
    return plans


# %% plan wrong: one sequence per micro-batch whenever it fits (the most accumulation)
def plan(memory, budget, global_batch):
    plans = {}
    for config, m in memory.items():
        share = global_batch // m["dp_degree"]
        need = m["state"] + m["transient"]
        if need + m["per_sample"] <= budget:
            plans[config] = (1, share, False)
        elif need + m["per_sample_ckpt"] <= budget:
            plans[config] = (1, share, True)
        else:
            plans[config] = None
    return plans
