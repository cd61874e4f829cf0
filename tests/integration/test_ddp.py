"""DDP across the shared cluster: different data per rank, identical weights after each step."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytestmark = pytest.mark.timeout(90)

TRAIN = """
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

torch.manual_seed(0)                      # same initial weights on every rank
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
initial = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.Generator().manual_seed(1000 + rank)   # different data on every rank
losses = []
for step in range(4):
    x = torch.randn(32, 8, generator=data)
    y = x.sum(dim=1, keepdim=True)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
state = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
"""


def test_ddp_keeps_the_ranks_weights_identical(shell: Any, cluster2: Any) -> None:
    shell.run_cell_magic("dist", "", TRAIN)
    states = shell.run_line_magic("dist_pull", "state --all")
    initial = shell.run_line_magic("dist_pull", "initial")
    losses = shell.run_line_magic("dist_pull", "losses --all")
    assert sorted(states) == [0, 1]
    # Each rank saw its own data ...
    assert losses[0] != losses[1]
    # ... yet gradients were averaged, so both hold the same weights, which did change.
    for name, value in states[0].items():
        assert torch.equal(value, states[1][name]), name
    assert any(not torch.equal(states[0][k], initial[k]) for k in initial)
