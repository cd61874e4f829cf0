# Solutions of 02_data_partition.ipynb (see testbed/exercises.py for the format).

# %% partition
%%dist
import math

def my_indices(n, rank, world_size):
    per_rank = math.ceil(n / world_size)
    total = per_rank * world_size
    indices = list(range(n))
    while len(indices) < total:  # pad by repeating from the start (n may be < world_size)
        indices += indices[: total - len(indices)]
    return indices[rank:total:world_size]

# %% partition wrong: a stride without padding: ranks get different counts when n is uneven
%%dist
def my_indices(n, rank, world_size):
    return list(range(n))[rank::world_size]

# %% partition wrong: contiguous blocks: the same counts, but not the sampler's stride
%%dist
import math

def my_indices(n, rank, world_size):
    per_rank = math.ceil(n / world_size)
    indices = list(range(n)) * world_size  # padded from the start
    return indices[rank * per_rank:(rank + 1) * per_rank]

# %% partition wrong: pads once with the head of the list, too short when n < world_size
%%dist
import math

def my_indices(n, rank, world_size):
    total = math.ceil(n / world_size) * world_size
    indices = list(range(n))
    indices += indices[: total - n]
    return indices[rank:total:world_size]
