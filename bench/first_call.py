"""First calls: does the first ``%%dist_train`` and ``%dist_pull`` of a kernel cost what
later ones do?

    python -m bench run first_call              # 2 fresh kernels
    python -m bench run first_call --reps 1 --think 0

Each repetition is a fresh child process (a new kernel): ``%dist_cluster start -n 2
--cpu``, a pause of ``--think`` seconds (a user reading the start's output and typing the
next cell), then the same small ``%%dist_train`` (a DDP MLP, 50 steps) three times and the
same ``%dist_pull`` of a small state dict three times, each timed in the kernel around the
magic. Writes ``bench/results/first_call.json``: per call, the median over kernels, and
first / median(later) as the ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from typing import Any

from bench import common

TRAIN = """
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
for step in range(50):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    report(step=step, loss=loss, samples=32)
"""
PULL = "{k: v.detach() for k, v in model.module.state_dict().items()}"
CALLS = 3


def child(think: float) -> None:
    common.use_scratch_store()
    ip = common.shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    common.quietly(ip.run_line_magic, "dist_cluster", "start -n 2 --cpu")
    time.sleep(think)
    out: dict[str, list[float]] = {"dist_train": [], "dist_pull": []}
    for _ in range(CALLS):
        t0 = time.perf_counter()
        common.quietly(ip.run_cell_magic, "dist_train", "--steps 50 --no-dashboard", TRAIN)
        out["dist_train"].append(time.perf_counter() - t0)
    for _ in range(CALLS):
        t0 = time.perf_counter()
        value = common.quietly(ip.run_line_magic, "dist_pull", PULL)[0]
        out["dist_pull"].append(time.perf_counter() - t0)
        assert set(value) == {"0.weight", "0.bias", "2.weight", "2.bias"}, value
    common.quietly(ip.run_line_magic, "dist_cluster", "stop")
    print("BENCH_RESULT " + json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1 if common.quick() else 3)
    parser.add_argument("--think", type=float, default=3.0, help="seconds after the start")
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.think)
        return
    runs: list[dict[str, list[float]]] = []
    for rep in range(args.reps):
        cmd = common.module_cmd("first_call", "--child", "--think", str(args.think))
        done = subprocess.run(
            cmd,
            env=common.child_env(threads=None),
            capture_output=True,
            text=True,
            timeout=400,
            cwd=common.ROOT,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        runs.append(common.result_line(done.stdout))
        print(f"rep {rep + 1}: {runs[-1]}", flush=True)
    results: dict[str, Any] = {}
    for call in ("dist_train", "dist_pull"):
        first = common.stats([r[call][0] for r in runs])
        later = common.stats([v for r in runs for v in r[call][1:]])
        results[call] = {"first": first, "later": later, "ratio": first["median"] / later["median"]}
        print(f"{call}: first {first['median']:.3f} s, later {later['median']:.3f} s")
    common.write_result(
        "first_call",
        {
            "what": "seconds of the first and later calls in a fresh kernel, 2 CPU ranks, "
            f"after {args.think:.0f} s of thinking time past the start",
            "reps": args.reps,
            "think_s": args.think,
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
