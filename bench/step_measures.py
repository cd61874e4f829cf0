"""What report()'s step measures cost a training step: the new ones beside the former.

    python -m bench run step_measures              # 16 rounds
    python -m bench run step_measures --hogs 2     # beside two busy processes
    BENCH_QUICK=1 python -m bench run step_measures

Two CPU ranks (gloo, one thread each) train the issue's MLP (256 -> 1024 -> 256, batch 64,
~20 ms a step) under DDP. In each round every side runs a block of steps, the sides
interleaved in a rotating order, so the machine's drift falls on all of them:

- **bare**: the loop alone (what it costs under torchrun);
- **former**: plus what the former report() read per step: DDP's logging data
  (``_get_ddp_logging_data``, its sample of the step before);
- **new**: plus what report() does now: ``commtime.comm_metrics`` (DDP's logger writes
  this step's timings, then the read) and ``StepMeasures.take()`` (CPU time, CPU wait,
  load, cores, peak memory).

Each side's steps/s is the median over rounds of (steps / block wall time, the slower
rank's); the ratio to bare is given per round (median and range). Beside it, each
side's CPU time of the training thread a step (``time.thread_time``, median over rounds
of the ranks' mean), less sensitive to a shared machine's load than wall time, and the
time of the extra work itself (median us over every step; it runs first after the step,
with the caches cold, so it is dearer than the same calls timed in a loop of their own). Writes
``bench/results/step_measures.json`` (``step_measures_hogs<N>.json`` with hogs).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from bench import common

SIDES = ["bare", "former", "new"]
ROUNDS = 2 if common.quick() else 16
STEPS = 10 if common.quick() else 40  # per block
WARMUP = 10


def _rank(rank: int, port: int, out: Any) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dist_notebook import privates
    from dist_notebook.engine import commtime
    from dist_notebook.engine.stepmeasures import StepMeasures

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    commtime.watch_new_models()
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)
    )
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)
    measures = StepMeasures()

    def extra(side: str) -> float:
        t = time.perf_counter()
        if side == "former":
            privates.ddp_logging_data(model)  # the former read: the whole logging data
        elif side == "new":
            commtime.comm_metrics(time.time())
            measures.take()
        return time.perf_counter() - t

    def block(side: str, steps: int) -> tuple[float, float, list[float]]:
        dist.barrier()
        costs = []
        c0 = time.thread_time()
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            costs.append(extra(side))
        return time.perf_counter() - t0, time.thread_time() - c0, costs

    commtime.install()
    block("new", WARMUP)
    walls: dict[str, list[float]] = {s: [] for s in SIDES}
    cpus: dict[str, list[float]] = {s: [] for s in SIDES}
    costs: dict[str, list[float]] = {s: [] for s in SIDES}
    for r in range(ROUNDS):
        for side in SIDES[r % 3 :] + SIDES[: r % 3]:
            wall, cpu, cost = block(side, STEPS)
            walls[side].append(wall)
            cpus[side].append(cpu / STEPS)
            costs[side].extend(cost)
    commtime.uninstall()
    measures.close()
    out.put((rank, walls, costs, cpus))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=0, help="busy processes beside the ranks")
    hogs = parser.parse_args().hogs
    with common.cpu_hogs(hogs):
        measure("step_measures" + (f"_hogs{hogs}" if hogs else ""))


def measure(name: str) -> None:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    port = common.free_port()
    procs = [ctx.Process(target=_rank, args=(rank, port, out)) for rank in range(2)]
    for p in procs:
        p.start()
    got = [out.get() for _ in procs]
    for p in procs:
        p.join()
    walls = {s: [max(g[1][s][r] for g in got) for r in range(ROUNDS)] for s in SIDES}
    rates = {s: [STEPS / w for w in walls[s]] for s in SIDES}
    ratios = {s: [a / b for a, b in zip(rates[s], rates["bare"], strict=True)] for s in SIDES}
    cost_us = {s: statistics.median(c for g in got for c in g[2][s]) * 1e6 for s in SIDES}
    cpu_ms = {
        s: [statistics.mean(g[3][s][r] for g in got) * 1e3 for r in range(ROUNDS)] for s in SIDES
    }
    rows = []
    for s in SIDES:
        rows.append(
            [
                s,
                common.fmt(statistics.median(rates[s]), 1),
                common.fmt(statistics.median(ratios[s]), 3),
                f"{min(ratios[s]):.3f}-{max(ratios[s]):.3f}",
                common.fmt(statistics.median(cpu_ms[s]), 3),
                common.fmt(cost_us[s], 1),
            ]
        )
    print(
        common.md_table(
            [
                "side",
                "steps/s (median)",
                "vs bare (median)",
                "vs bare (range)",
                "CPU ms/step",
                "extra us/step",
            ],
            rows,
        )
    )
    common.write_result(
        name,
        {
            "rounds": ROUNDS,
            "steps_per_block": STEPS,
            "steps_per_s": rates,
            "ratio_to_bare": ratios,
            "cpu_ms_per_step": cpu_ms,
            "extra_us_per_step_median": cost_us,
        },
    )


if __name__ == "__main__":
    main()
