"""Each record's step measures on real runs of the shared 2-rank gloo cluster.

comm_time is the wait of the step report() closes: a 0.3 s stall of rank 0 before its
forward at step 12 is in rank 1's step-12 record and not in its step 13; a 50 ms sleep of
rank 0 from step 12 on is in rank 1's records from step 12 on. Every DDP model of the rank
is watched wherever it was built: in the training cell, in a ``%%dist`` cell before the
run, unpickled (a whole model restored from a checkpoint), and, on an engine that did not
watch from its boot, one built before the first run. Run under two CPU hogs too
(DIST_NOTEBOOK_TEST_CPU_HOGS=2).
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from IPython.utils.capture import capture_output

import dist_notebook

DEFINE = """
import io, time
import torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from dist_notebook import report

def new_model():
    torch.manual_seed(0)
    return DDP(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))

def measured_run(steps, model=None, stall_at=None, stall=0.0, from_on=False, sleeper=0):
    model = model if model is not None else new_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(dist.get_rank())
    x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
    for step in range(steps):
        if dist.get_rank() == sleeper and (step == stall_at or (from_on and step >= stall_at)):
            time.sleep(stall)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        report(step=step, loss=loss.item(), samples=32)

def costly_run(steps):
    model = new_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for step in range(steps):
        if dist.get_rank() == 1 and step == 10:
            end = time.thread_time() + 0.1
            while time.thread_time() < end:  # 0.1 s of the rank's own CPU
                pass
            block = bytearray(200 * 2**20)
            block[::4096] = b"x" * len(block[::4096])  # 200 MiB resident, then freed
            del block
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        report(step=step, loss=loss.item(), samples=32, data_time=0.001 * step)

def stalled_steps(model):
    # DDP steps outside any run; in the last, rank 0 sleeps 0.3 s and rank 1 waits for it
    for step in range(3):
        if dist.get_rank() == 0 and step == 2:
            time.sleep(0.3)
        loss = nn.functional.cross_entropy(model(torch.randn(8, 64)), torch.randint(0, 10, (8,)))
        loss.backward()
"""
STEPS = 24


@pytest.fixture(scope="module")
def defined(shell: Any, cluster2: Any) -> Any:
    shell.run_cell_magic("dist", "", DEFINE)
    return shell


def train(shell: Any, name: str, cell: str) -> Any:
    with capture_output():
        shell.run_cell_magic("dist_train", f"--name {name} --no-dashboard --timeout 120", cell)
    run = dist_notebook.load_run(name)
    assert run.state == "succeeded", run.state
    return run


def comm_ms(run: Any, rank: int) -> dict[int, float]:
    return {
        r.step: r.comm_time * 1e3
        for r in run.records()
        if r.rank == rank and r.comm_time is not None
    }


def test_a_one_step_stall_is_in_that_steps_record_not_the_next(defined: Any) -> None:
    run = train(defined, "stall-once", f"measured_run({STEPS}, stall_at=12, stall=0.3)")
    waited = comm_ms(run, 1)
    assert waited[12] >= 200, f"rank 1 waited 0.3 s at step 12; its records: {waited}"
    assert waited[13] < 100, f"the stall is step 12's, not step 13's: {waited}"
    assert 0 in waited, "the first step has its comm time too"


def test_a_sleep_from_step_12_on_shows_from_step_12(defined: Any) -> None:
    run = train(
        defined, "sleep-from-12", f"measured_run({STEPS}, stall_at=12, stall=0.05, from_on=True)"
    )
    waited = comm_ms(run, 1)
    later = [waited[s] for s in range(12, STEPS)]
    assert min(later) >= 30, f"rank 1 waits ~50 ms a step from step 12 on: {waited}"
    before = statistics.median(waited[s] for s in range(1, 12))
    assert before < 25, f"before step 12 nobody slept: {waited}"


def test_each_record_carries_its_steps_cpu_time_cpu_wait_load_and_peak_memory(
    defined: Any,
) -> None:
    run = train(defined, "costly", f"costly_run({STEPS})")
    recs = {(r.rank, r.step): r for r in run.records()}
    spent = recs[1, 10]
    assert spent.cpu_time is not None and spent.cpu_time >= 0.09, spent
    assert all(recs[1, s].cpu_time < 0.09 for s in (9, 11, 12)), [recs[1, s] for s in (9, 11)]
    assert spent.peak_mem is not None and spent.peak_mem >= recs[1, 9].peak_mem + 150 * 2**20
    # the high-water mark is reset each step: the step after is back down
    assert recs[1, 12].peak_mem < spent.peak_mem - 150 * 2**20, (recs[1, 12], spent)
    for (_, step), r in recs.items():
        assert r.data_time == pytest.approx(0.001 * step) and "data_time" not in r.metrics
        assert r.load is not None and r.cores is not None and r.cores >= 1
        if step:
            assert r.cpu_time is not None and r.run_delay is not None and r.run_delay >= 0


def shares(run: Any) -> list[Any]:
    return [s.comm_share for s in run.summaries()]


def test_a_model_built_in_a_dist_cell_before_the_run_is_watched(defined: Any) -> None:
    defined.run_cell_magic("dist", "", "built_before = new_model()")
    run = train(defined, "built-before", f"measured_run({STEPS}, model=built_before)")
    assert all(share is not None for share in shares(run)), shares(run)
    assert all(len(comm_ms(run, rank)) == STEPS for rank in (0, 1))


def test_a_model_restored_from_a_checkpoint_is_watched(defined: Any) -> None:
    defined.run_cell_magic(
        "dist",
        "",
        "buffer = io.BytesIO()\n"
        "torch.save(new_model(), buffer)\n"
        "buffer.seek(0)\n"
        "restored = torch.load(buffer, weights_only=False)\n",
    )
    run = train(defined, "restored", f"measured_run({STEPS}, model=restored)")
    assert all(share is not None for share in shares(run)), shares(run)


def test_a_model_that_does_not_train_in_the_run_adds_no_wait(defined: Any) -> None:
    # Earlier cells' models stay alive and watched (notebook 4 keeps a dozen), their last
    # step's timings in DDP's logging data; here rank 1 waited 0.3 s in that last step.
    defined.run_cell_magic("dist", "", "earlier = new_model()\nstalled_steps(earlier)")
    run = train(
        defined,
        "others-idle",
        f"measured_run({STEPS}, stall_at=0, stall=0.04, from_on=True, sleeper=1)",
    )
    waited = comm_ms(run, 1)
    steps = {r.step: r.step_time * 1e3 for r in run.records() if r.rank == 1 and r.step_time}
    later = [waited[s] for s in range(1, STEPS)]
    # rank 1 sleeps 40 ms a step: the others wait for it, it waits for nobody
    assert statistics.median(later) < 20, f"rank 1's waits {waited}, steps {steps}"
    flagged = [s.rank for s in run.summaries() if s.straggler]
    assert flagged == [1], [(s.rank, s.comm_share, s.outside_comm_time) for s in run.summaries()]


def test_an_engine_not_watching_from_boot_finds_the_models_built_before(defined: Any) -> None:
    # As on an engine started without dist_notebook's boot: nothing watched, no patch.
    defined.run_cell_magic(
        "dist",
        "",
        "from dist_notebook.engine import commtime\ncommtime.unwatch()\nunseen = new_model()",
    )
    run = train(defined, "found-by-scan", f"measured_run({STEPS}, model=unseen)")
    assert all(share is not None for share in shares(run)), shares(run)
    defined.run_cell_magic("dist", "", "assert commtime.watch_new_models() is False")
