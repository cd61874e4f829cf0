# Solutions of 01_data_parallel_basics.ipynb (see testbed/exercises.py for the format).

# %% weighted-average
%%dist
def average_gradients(module, n_local):
    """Make every .grad the gradient of the mean loss over all ranks' samples."""
    total = torch.tensor([float(n_local)], device=device)
    dist.all_reduce(total)  # N: the samples of all ranks together
    for p in module.parameters():
        if p.grad is not None:
            p.grad *= n_local / total.item()  # (1 / n_local) * sum  ->  (1 / N) * my part
            dist.all_reduce(p.grad)  # sum of the parts = (1 / N) * sum over all samples

# %% weighted-average wrong: a plain mean, as DDP does: right only when every batch has the same size
%%dist
def average_gradients(module, n_local):
    for p in module.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world_size

# %% weighted-average wrong: the sum over ranks, never divided
%%dist
def average_gradients(module, n_local):
    for p in module.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)

# %% weighted-average wrong: weighted by n_local but not normalised by the total
%%dist
def average_gradients(module, n_local):
    for p in module.parameters():
        if p.grad is not None:
            p.grad *= n_local
            dist.all_reduce(p.grad)
            p.grad /= world_size * n_local
