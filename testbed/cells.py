"""Cells that tests/ and bench/ both run on the ranks."""

# A learnable synthetic task: y = x @ w with one w shared by every rank, each rank
# drawing its own x. A 2-layer MLP under DDP fits it within ~30 steps.
TRAIN_CELL = """
import torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from dist_notebook import report

torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(100 + dist.get_rank())
w = torch.randn(8, 1, generator=torch.Generator().manual_seed(1))
for i in range({steps}):
    x = torch.randn(32, 8, generator=gen)
    loss = ((model(x) - x @ w) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    report(step=i, loss=loss, samples=32)
"""
