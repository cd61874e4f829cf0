# Solutions of 03_train_ddp_live.ipynb (see testbed/exercises.py for the format).

# %% parallel-eval
%%dist
def distributed_accuracy(model, X, y):
    """Accuracy over all of X; this rank evaluates X[rank::world_size] only."""
    with torch.no_grad():
        mine_X, mine_y = X[rank::world_size], y[rank::world_size]
        right = (model(mine_X).argmax(dim=1) == mine_y).sum().item()
    counts = torch.tensor([float(right), float(len(mine_y))], device=device)
    dist.all_reduce(counts)  # [right answers, samples] over all ranks
    return (counts[0] / counts[1]).item()

# %% parallel-eval wrong: the mean of the ranks' accuracies, right only when every part has as many samples
%%dist
def distributed_accuracy(model, X, y):
    with torch.no_grad():
        mine_X, mine_y = X[rank::world_size], y[rank::world_size]
        acc = (model(mine_X).argmax(dim=1) == mine_y).float().mean()
    dist.all_reduce(acc)
    return (acc / world_size).item()

# %% parallel-eval wrong: split with a padding DistributedSampler, which scores some samples twice
%%dist
from torch.utils.data import DistributedSampler

def distributed_accuracy(model, X, y):
    index = list(DistributedSampler(range(len(y)), shuffle=False))
    with torch.no_grad():
        right = (model(X[index]).argmax(dim=1) == y[index]).sum().item()
    counts = torch.tensor([float(right), float(len(index))], device=device)
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()

# %% parallel-eval wrong: this rank's part only, never combined
%%dist
def distributed_accuracy(model, X, y):
    with torch.no_grad():
        mine_X, mine_y = X[rank::world_size], y[rank::world_size]
        return (model(mine_X).argmax(dim=1) == mine_y).float().mean().item()

# %% average-models
%%dist
def average_models(module):
    """Replace every parameter by its mean over all ranks, in place."""
    with torch.no_grad():
        for p in module.parameters():
            dist.all_reduce(p)
            p /= world_size

# %% average-models wrong: rank 0's weights broadcast: equal copies, but not a merge
%%dist
def average_models(module):
    with torch.no_grad():
        for p in module.parameters():
            dist.broadcast(p, src=0)

# %% average-models wrong: the mean computed on a copy that is never written back
%%dist
def average_models(module):
    for p in module.parameters():
        mean = p.detach().clone()
        dist.all_reduce(mean)
        mean /= world_size

# %% average-models wrong: summed, not divided by world_size
%%dist
def average_models(module):
    with torch.no_grad():
        for p in module.parameters():
            dist.all_reduce(p)
