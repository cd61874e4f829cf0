# Solutions of notebook 12 (find a training configuration). Each section replaces the
# exercise cell it names; "wrong:" sections are plausible mistakes the check must reject.

# %% plan
def plan(memory, budget, global_batch):
    """{config: (micro_batch, accumulation) or None}."""
    plans = {}
    for config, m in memory.items():
        share = global_batch // m["dp_degree"]  # sequences per data-parallel group per step
        fits = [
            b
            for b in range(1, share + 1)
            if share % b == 0 and m["state"] + b * m["per_sample"] <= budget
        ]
        ok = fits and global_batch % m["dp_degree"] == 0
        plans[config] = (max(fits), share // max(fits)) if ok else None
    return plans


# %% plan wrong: only the activations count against the budget (the state is forgotten)
def plan(memory, budget, global_batch):
    plans = {}
    for config, m in memory.items():
        share = global_batch // m["dp_degree"]
        fits = [b for b in range(1, share + 1) if share % b == 0 and b * m["per_sample"] <= budget]
        plans[config] = (max(fits), share // max(fits)) if fits else None
    return plans


# %% plan wrong: the largest micro-batch that fits, rounded up accumulation (global batch missed)
def plan(memory, budget, global_batch):
    plans = {}
    for config, m in memory.items():
        share = global_batch // m["dp_degree"]
        b = min(share, (budget - m["state"]) // m["per_sample"])
        plans[config] = (b, -(-share // b)) if b >= 1 else None
    return plans


# %% plan wrong: every rank is its own data-parallel group (4 ranks), also under tensor parallelism
def plan(memory, budget, global_batch):
    plans = {}
    for config, m in memory.items():
        share = global_batch // 4
        fits = [
            b
            for b in range(1, share + 1)
            if share % b == 0 and m["state"] + b * m["per_sample"] <= budget
        ]
        plans[config] = (max(fits), share // max(fits)) if fits else None
    return plans


# %% plan wrong: one sequence per micro-batch whenever it fits (the most accumulation)
def plan(memory, budget, global_batch):
    plans = {}
    for config, m in memory.items():
        share = global_batch // m["dp_degree"]
        fits = m["state"] + m["per_sample"] <= budget
        plans[config] = (1, share) if fits else None
    return plans
