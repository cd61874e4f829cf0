# Solutions to the exercises of 10_many_machines.ipynb, and plausible wrong answers the checks reject.

# %% ranks
def global_rank(node_rank, local_rank, nproc_per_node):
    return node_rank * nproc_per_node + local_rank


def node_of(rank, nproc_per_node):
    return rank // nproc_per_node


# %% ranks wrong: node and local rank swapped in the formula
def global_rank(node_rank, local_rank, nproc_per_node):
    return local_rank * nproc_per_node + node_rank


def node_of(rank, nproc_per_node):
    return rank % nproc_per_node


# %% ranks wrong: the local rank is taken for the global one
def global_rank(node_rank, local_rank, nproc_per_node):
    return local_rank


def node_of(rank, nproc_per_node):
    return rank // nproc_per_node
