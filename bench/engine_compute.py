"""Does a rank's engine slow the user's own computation? One engine vs plain processes.

    python -m bench run engine_compute [--reps 60] [--steps 600]

The same compute-only training step (a 64-256-256-10 MLP, batch 64, SGD, one thread, no
collective) runs in blocks of ``--steps`` steps in three places, interleaved block by
block in rotating order:

- **engine**: a rank of a one-rank cluster started by ``DistCluster`` with the fork server
  off, so the engine is spawned as remote launchers spawn theirs (``python -m
  dist_notebook.boot.engine``), with its threads (IOPub, control, heart, output pipes);
- **plain** and **plain2**: two plain ``python`` processes holding the same loop, fed
  block sizes on stdin. plain2 / plain is the A/A control: how far two identical
  processes differ on this machine, the noise any engine / plain ratio must beat.

Each block reports its wall time per step and the thread's CPU time per step; the ratios
are taken within each round (the three blocks of one round ran back to back). Writes
``bench/results/engine_compute.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
from typing import Any

from bench import common
from bench.common import PY, fmt, md_table

LOOP = """
def compute_block(steps):
    import time, torch, torch.nn as nn
    state = globals().setdefault("_compute_state", {})
    if not state:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                              nn.Linear(256, 10))
        state.update(model=model, opt=torch.optim.SGD(model.parameters(), lr=0.01),
                     xs=torch.randn(32, 64, 64), ys=torch.randint(0, 10, (32, 64)))
    model, opt, xs, ys = state["model"], state["opt"], state["xs"], state["ys"]
    def step(i):
        loss = nn.functional.cross_entropy(model(xs[i % 32]), ys[i % 32])
        opt.zero_grad(); loss.backward(); opt.step()
    for i in range(20):
        step(i)
    t0, c0 = time.perf_counter(), time.thread_time()
    for i in range(steps):
        step(i)
    return (time.perf_counter() - t0) / steps * 1e3, (time.thread_time() - c0) / steps * 1e3
"""

SERVE = (
    LOOP
    + """
import sys
for line in sys.stdin:
    print(*compute_block(int(line)), flush=True)
"""
)


class Plain:
    """A plain python process running blocks of the loop on request."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [PY, "-u", "-c", SERVE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=common.child_env(threads=1),
        )

    def block(self, steps: int) -> tuple[float, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        wall, cpu = self.proc.stdout.readline().split()
        return float(wall), float(cpu)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _call_block(steps: int) -> tuple[float, float]:
    from IPython import get_ipython

    return tuple(get_ipython().user_ns["compute_block"](steps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=6 if common.quick() else 60)
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    os.environ["DIST_NOTEBOOK_FORKSERVER"] = "0"  # spawned, as over ssh, Slurm or MPI
    common.use_scratch_store()
    from dist_notebook import ClusterSpec, DistCluster
    from dist_notebook.cluster.onranks.execute import apply_on_ranks, run_on_ranks

    cluster = DistCluster(ClusterSpec(n=1, threads=1))
    plains = {"plain": Plain(), "plain2": Plain()}
    raw: dict[str, list[tuple[float, float]]] = {"engine": [], "plain": [], "plain2": []}
    try:
        cluster.start_sync()
        run_on_ranks(cluster, LOOP)
        for rep in range(args.reps):
            order = list(raw)[rep % 3 :] + list(raw)[: rep % 3]
            for side in order if rep % 2 == 0 else order[::-1]:
                if side == "engine":
                    value = apply_on_ranks(cluster, _call_block, args.steps)[0].value
                else:
                    value = plains[side].block(args.steps)
                raw[side].append(value)
    finally:
        cluster.stop_sync()
        for plain in plains.values():
            plain.close()
    report(raw, args)


def report(raw: dict[str, list[tuple[float, float]]], args: Any) -> None:
    rows = []
    for side, vals in raw.items():
        walls = [w for w, _ in vals]
        rows.append(
            [
                side,
                fmt(statistics.median(walls), 4),
                f"{fmt(min(walls), 4)}-{fmt(max(walls), 4)}",
                fmt(statistics.median(c for _, c in vals), 4),
            ]
        )
    ratios = {}
    for a, b in (("engine", "plain"), ("engine", "plain2"), ("plain2", "plain")):
        r = [x[0] / y[0] for x, y in zip(raw[a], raw[b], strict=True)]
        ratios[f"{a} / {b}"] = r
        rows.append(
            [
                f"{a} / {b}, within each round",
                fmt(statistics.median(r), 3) + "x",
                f"{fmt(min(r), 3)}-{fmt(max(r), 3)}",
                "",
            ]
        )
    table = md_table(
        [
            f"{args.reps} rounds x {args.steps} steps",
            "ms per step, median",
            "min-max",
            "CPU ms per step, median",
        ],
        rows,
    )
    print(table)
    common.write_result(
        "engine_compute",
        {"reps": args.reps, "steps": args.steps, "raw": raw, "ratios": ratios, "table": table},
    )


if __name__ == "__main__":
    main()
