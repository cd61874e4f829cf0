"""The verdict on real 2-rank gloo runs: a starved rank against one that does more work.

*starved*: each rank's training thread pinned to a core of its own, and two busy processes
pinned to rank 1's core (``os.sched_setaffinity``): rank 1 does the same work as rank 0 and
gets a third of its core. It must not be marked the straggler, and the verdict must not
say that it (or rank 0) does more work. *shard*: rank 1's batch is 4x rank 0's: the verdict
names rank 1 as doing more work.

Tolerant on a busy machine (run with DIST_NOTEBOOK_TEST_CPU_HOGS=2 too): what is asserted
is what held with two CPU hogs beside in bench/straggler.py, no exact flag list or share.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from IPython.utils.capture import capture_output

import dist_notebook

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs os.sched_setaffinity and two cores",
)

DEFINE = """
import os, subprocess, sys
import torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from dist_notebook import report

def verdict_loop(steps, batch):
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(dist.get_rank())
    x, y = torch.randn(batch, 256, generator=g), torch.randint(0, 10, (batch,), generator=g)
    for step in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        report(step=step, loss=loss.item(), samples=batch)

def starved_run(steps):
    rank = dist.get_rank()
    before = os.sched_getaffinity(0)
    cpus = sorted(before)
    core = cpus[rank % len(cpus)]
    busy = []
    try:
        os.sched_setaffinity(0, {core})
        if rank == 1:
            for _ in range(2):
                p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                busy.append(p)
                os.sched_setaffinity(p.pid, {core})
        verdict_loop(steps, 256)
    finally:
        for p in busy:
            p.kill()
            p.wait()
        os.sched_setaffinity(0, before)

def shard_run(steps):
    verdict_loop(steps, 256 if dist.get_rank() == 1 else 64)
"""
STEPS = 40


@pytest.fixture(scope="module")
def defined(shell: Any, cluster2: Any) -> Any:
    shell.run_cell_magic("dist", "", DEFINE)
    return shell


def train(shell: Any, name: str, cell: str) -> Any:
    with capture_output():
        shell.run_cell_magic("dist_train", f"--name {name} --no-dashboard --timeout 120", cell)
    run = dist_notebook.load_run(name)
    assert run.state == "succeeded", run.state
    return run.summary()


@pytest.mark.slow
def test_a_starved_rank_is_not_the_straggler(defined: Any) -> None:
    summary = train(defined, "verdict-starved", f"starved_run({STEPS})")
    r0, r1 = summary.ranks
    said = summary.verdict or ""
    assert not r0.straggler and not r1.straggler, (said, summary.ranks)
    assert "work of the median" not in said, (said, summary.ranks)
    assert not r0.starved, (said, summary.ranks)
    # rank 1 waited for a CPU longer than rank 0 in its median step
    assert r1.run_delay is not None and r0.run_delay is not None
    assert r1.run_delay > r0.run_delay, (said, summary.ranks)
    assert said.startswith("rank 1 is starved: it gets"), (said, summary.ranks)
    assert said.endswith("nothing to fix in the code")


@pytest.mark.slow
def test_a_heavier_shard_does_more_work(defined: Any) -> None:
    summary = train(defined, "verdict-shard", f"shard_run({STEPS})")
    r0, r1 = summary.ranks
    said = summary.verdict or ""
    assert said.startswith("rank 1 does "), (said, summary.ranks)
    assert said.endswith("the work of the median rank: its shard or its branch is heavier")
    assert r1.work_ratio is not None and r1.work_ratio >= 1.3
    assert not r0.straggler and not r0.starved and not r1.starved
