# Solutions of 07_sharded_data_parallel.ipynb (see testbed/exercises.py for the format).

# %% shard-rows
%%dist
import math

def rows_on_rank(rows, rank, world_size):
    per = math.ceil(rows / world_size)  # torch.chunk's chunk size
    return max(0, min(per, rows - rank * per))

# %% shard-rows wrong: rows // world_size: right whenever the rows divide evenly, as on 2 ranks here
%%dist
def rows_on_rank(rows, rank, world_size):
    return rows // world_size

# %% shard-rows wrong: balanced like numpy.array_split (sizes differ by at most one), not torch.chunk
%%dist
def rows_on_rank(rows, rank, world_size):
    return rows // world_size + (1 if rank < rows % world_size else 0)

# %% shard-rows wrong: ceil(rows / world_size) on every rank, forgetting the short last chunk
%%dist
import math

def rows_on_rank(rows, rank, world_size):
    return math.ceil(rows / world_size)

# %% zero-by-hand
%%dist
def zero_step(stage, params, grad, state):
    n = params.numel() // world_size
    mine = slice(rank * n, (rank + 1) * n)
    if stage == 1:
        kept = grad.clone()
        dist.all_reduce(kept)  # every rank: the whole summed gradient
        kept /= world_size
        grad_shard = kept[mine]
    else:
        kept = torch.empty(n, device=params.device)
        reduce_scatter(kept, grad)  # only my shard's sum arrives
        kept /= world_size
        grad_shard = kept
    shard = params[mine].clone()
    adam(shard, grad_shard, state)  # Adam's moments for my shard only
    all_gather(params, shard)  # every rank: the whole updated vector
    return kept

# %% zero-by-hand right: ZeRO-1 as DeepSpeed and the Playbook write it: reduce_scatter, update, all_gather
%%dist
def zero_step(stage, params, grad, state):
    n = params.numel() // world_size
    mine = slice(rank * n, (rank + 1) * n)
    grad_shard = torch.empty(n, device=params.device)
    reduce_scatter(grad_shard, grad)  # my shard's sum, in both stages
    grad_shard /= world_size
    shard = params[mine].clone()
    adam(shard, grad_shard, state)
    all_gather(params, shard)
    # ZeRO-1 keeps the whole gradient buffer backward wrote; ZeRO-2 only the averaged shard
    return grad if stage == 1 else grad_shard

# %% zero-by-hand wrong: ZeRO-2 as an all_reduce and a slice (the whole averaged gradient arrives anyway)
%%dist
def zero_step(stage, params, grad, state):
    n = params.numel() // world_size
    mine = slice(rank * n, (rank + 1) * n)
    full = grad.clone()
    dist.all_reduce(full)
    full /= world_size
    kept = full if stage == 1 else full[mine].clone()
    shard = params[mine].clone()
    adam(shard, full[mine], state)
    all_gather(params, shard)
    return kept

# %% zero-by-hand wrong: each rank updates its shard in place and never gathers the others' updates
%%dist
def zero_step(stage, params, grad, state):
    n = params.numel() // world_size
    mine = slice(rank * n, (rank + 1) * n)
    kept = grad.clone()
    dist.all_reduce(kept)
    kept /= world_size
    shard = params[mine]
    adam(shard, kept[mine], state)
    return kept if stage == 1 else kept[mine].clone()

# %% zero-by-hand wrong: Adam on the whole vector with the averaged gradient (right values, ZeRO-0's memory)
%%dist
def zero_step(stage, params, grad, state):
    kept = grad.clone()
    dist.all_reduce(kept)
    kept /= world_size
    adam(params, kept, state)
    return kept
