# Solutions of 07_sharded_data_parallel.ipynb (see tests/notebooks/exercises.py for the format).

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
