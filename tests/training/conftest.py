"""Fixtures for ``%%dist_train`` tests, on the session's shared 2-rank CPU cluster.

- ``trainer``: the shell's ``TrainMagics`` with ``train(...)`` defined on every rank by a
  ``%%dist`` cell (a DDP regression loop that reports every step), and no run left
  going after each test.
- ``wait_for``: polls a condition with a deadline and says what it waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# Defined once on every rank; the tests then call it from %%dist_train cells or the
# line form. ``pause`` sleeps each step (for runs that must last a while); without
# ``ddp`` the loop has no collective, so a rank that raises or is interrupted never
# leaves its peer blocked in gloo.
DEFINE_TRAIN = """
import time
import torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from dist_notebook import report

def train(steps, pause=0.0, ddp=True, fail_rank=None, fail_at=None):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    model = DDP(net) if ddp else net
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + dist.get_rank())
    w = torch.randn(8, 1, generator=torch.Generator().manual_seed(1))
    for i in range(steps):
        if dist.get_rank() == fail_rank and i == fail_at:
            raise ValueError(f"bad batch at step {i}")
        x = torch.randn(32, 8, generator=gen)
        loss = ((model(x) - x @ w) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        report(step=i, loss=loss, samples=32)
        if pause:
            time.sleep(pause)
    return steps
"""

TERMINAL = ("succeeded", "failed", "cancelled")


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.02) -> Any:
    """Poll *condition* until it is truthy; fail the test naming *what* after *timeout* s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


@pytest.fixture(scope="session")
def train_defined(shell: Any, cluster2: Any) -> Any:
    shell.run_cell_magic("dist", "", DEFINE_TRAIN)
    return cluster2


@pytest.fixture
def trainer(shell: Any, train_defined: Any) -> Iterator[Any]:
    """The TrainMagics instance; after the test, a run still going is stopped and awaited."""
    magics = shell.magics_manager.registry["TrainMagics"]
    yield magics
    run = magics.last_run
    if run is None or (magics.last_result and magics.last_result.run_id == run.id):
        return
    if run.state.value not in TERMINAL:
        run.stop()
    wait_for(
        lambda: magics.last_result and magics.last_result.run_id == run.id,
        30,
        f"run {run.name} to end",
    )


def result_of(magics: Any, run: Any, timeout: float = 30) -> Any:
    """Wait for a background run's RunResult and return it."""
    return wait_for(
        lambda: (
            magics.last_result
            if magics.last_result and magics.last_result.run_id == run.id
            else None
        ),
        timeout,
        f"run {run.name} to end",
    )
