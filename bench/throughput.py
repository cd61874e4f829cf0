"""Training throughput of one loop run five ways, 2 ranks, 1 thread a rank.

    python -m bench run throughput                      # MLP and CNN, 3 repetitions
    python -m bench run throughput --models mlp --reps 1

The same loop text (``loop_code``) runs everywhere; only the launcher differs:

  dist_train     ``%%dist_train`` with ``report()`` every step and the live dashboard
                 drawing (IPython shell, cluster from ``%dist_cluster start -n 2 --cpu
                 --threads 1``)
  torchrun       ``torchrun --standalone --nproc-per-node 2`` on a script with the loop
  accelerate     ``notebook_launcher(fn, num_processes=2)`` from a fresh process (fork)
  nbdistributed  ``%%distributed`` in the same IPython shell (``%dist_init -n 2``)
  single         one process, no DDP, no process group

Models: ``mlp`` (256-256-256-256-10 on synthetic data) and ``cnn`` (two 3x3 convolutions
on scikit-learn's bundled 8x8 digits, each rank its own shard; nothing is downloaded).
Batch 64 per rank. Only the loop is timed, inside it, on rank 0, after warm-up steps and
a barrier, so start-up never counts. OMP_NUM_THREADS=1 for every rank of every mode.
Modes run interleaved; medians and the ratio to torchrun. Writes
``bench/results/throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench import common

MODES = ["dist_train", "torchrun", "accelerate", "nbdistributed", "single"]
STEPS = {"mlp": 800, "cnn": 240}  # about 4 s and 6 s of loop at 2 ranks on 2 cores

LOOP = """
import time
import torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

_ddp = dist.is_available() and dist.is_initialized()
_rank = dist.get_rank() if _ddp else 0
_world = dist.get_world_size() if _ddp else 1
torch.manual_seed(0)
B = {batch}
if "{model}" == "mlp":
    net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    gen = torch.Generator().manual_seed(_rank)
    xs = torch.randn(16, B, 256, generator=gen)
    ys = torch.randint(0, 10, (16, B), generator=gen)
else:
    from sklearn.datasets import load_digits
    digits = load_digits()
    X = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    Y = torch.tensor(digits.target, dtype=torch.long)
    X, Y = X[_rank::_world], Y[_rank::_world]
    nb = len(X) // B
    xs, ys = X[: nb * B].reshape(nb, B, 1, 8, 8), Y[: nb * B].reshape(nb, B)
    net = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1),
                        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 16, 128),
                        nn.ReLU(),
                        nn.Linear(128, 10))
model = DDP(net) if _ddp else net
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
for i in range({warmup} + {steps}):
    if i == {warmup}:
        if _ddp:
            dist.barrier()
        t0 = time.perf_counter()
    loss = loss_fn(model(xs[i % len(xs)]), ys[i % len(xs)])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    REPORT
elapsed = time.perf_counter() - t0
bench_result = {{"elapsed": elapsed, "steps": {steps}, "batch": B, "world": _world,
                 "threads": torch.get_num_threads(), "loss": float(loss)}}
"""


def loop_code(model: str, steps: int, warmup: int, batch: int, reporting: bool) -> str:
    code = LOOP.format(model=model, steps=steps, warmup=warmup, batch=batch)
    code = code.replace(
        "REPORT", f"report(step=i, loss=loss, samples={batch})" if reporting else ""
    )
    return ("from dist_notebook import report\n" + code) if reporting else code


def samples_per_s(res: dict[str, Any]) -> float:
    return res["steps"] * res["batch"] * res["world"] / res["elapsed"]


# ---- children (configuration in BENCH_LOOP, never on the command line: torchrun parses it) ----


def _config() -> dict[str, Any]:
    return json.loads(os.environ["BENCH_LOOP"])


def _emit(ns: dict[str, Any]) -> None:
    print("BENCH_RESULT " + json.dumps(ns["bench_result"]), flush=True)


def child_torchrun_rank() -> None:
    import torch.distributed as dist

    cfg = _config()
    dist.init_process_group("gloo")
    ns: dict[str, Any] = {}
    exec(loop_code(**cfg, reporting=False), ns)
    if dist.get_rank() == 0:
        _emit(ns)
    dist.destroy_process_group()


def child_single() -> None:
    ns: dict[str, Any] = {}
    exec(loop_code(**_config(), reporting=False), ns)
    _emit(ns)


def _accelerate_fn(code: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    ns: dict[str, Any] = {}
    exec(code, ns)
    if dist.get_rank() == 0:
        _emit(ns)
    dist.destroy_process_group()


def child_accelerate() -> None:
    import torch  # noqa: F401  (imported in the notebook before launching, with 1 thread)
    from accelerate import notebook_launcher

    code = loop_code(**_config(), reporting=False)
    notebook_launcher(
        _accelerate_fn, args=(code,), num_processes=2, use_port=str(common.free_port())
    )


def run_child(kind: str, cfg: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    env = common.child_env(threads=1, BENCH_LOOP=json.dumps(cfg))
    if kind == "torchrun":
        cmd = common.torchrun_cmd("throughput", 2, "--child", "torchrun_rank")
    else:
        cmd = common.module_cmd("throughput", "--child", kind)
    done = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=common.ROOT
    )
    try:
        return common.result_line(done.stdout)
    except RuntimeError:
        tail = done.stderr.strip().splitlines()
        raise RuntimeError(
            f"{kind} exit {done.returncode}: {tail[-1] if tail else 'no output'}"
        ) from None


# ---- the notebook side: one shell with a dist-notebook cluster and nbdistributed workers ----


class Notebook:
    def __init__(self) -> None:
        os.environ["OMP_NUM_THREADS"] = "1"  # nbdistributed's workers inherit the kernel's env
        os.environ["MKL_NUM_THREADS"] = "1"
        os.environ["PATH"] = common.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        self.ip = common.shell()
        self.ip.run_line_magic("load_ext", "dist_notebook")
        self.ip.run_line_magic("load_ext", "nbdistributed")
        common.quietly(self.ip.run_line_magic, "dist_cluster", "start -n 2 --cpu --threads 1")
        self.nbd_error: str | None = None
        try:
            _, out = common.quietly(self.ip.run_line_magic, "dist_init", "-n 2")
            if "Successfully started" not in out.stdout:
                raise RuntimeError(out.stdout.strip().splitlines()[-1])
            from cold_start import nbdistributed_wait_ready

            nbdistributed_wait_ready(self.ip, 2)
        except Exception as e:
            self.nbd_error = f"{type(e).__name__}: {e}"

    def dist_train(self, cfg: dict[str, Any]) -> dict[str, Any]:
        code = loop_code(**cfg, reporting=True)
        common.quietly(
            self.ip.run_cell_magic, "dist_train", f"--steps {cfg['warmup'] + cfg['steps']}", code
        )
        # The cell returns nothing; the magics keep the run's result.
        result = self.ip.magics_manager.registry["TrainMagics"].last_result
        if result is None or result.state.value != "succeeded":
            raise RuntimeError(f"the %%dist_train run did not succeed: {result}")
        value, _ = common.quietly(self.ip.run_line_magic, "dist_pull", "bench_result")
        return value

    def nbdistributed(self, cfg: dict[str, Any]) -> dict[str, Any]:
        if self.nbd_error:
            raise RuntimeError(self.nbd_error)
        code = loop_code(**cfg, reporting=False)
        code += (
            "\nimport json\nif _rank == 0:\n    print('BENCH_RESULT ' + json.dumps(bench_result))\n"
        )
        _, out = common.quietly(self.ip.run_cell_magic, "distributed", "", code)
        return common.result_line(out.stdout)

    def stop(self) -> None:
        common.quietly(self.ip.run_line_magic, "dist_cluster", "stop")
        if not self.nbd_error:
            from cold_start import nbdistributed_stop

            nbdistributed_stop(self.ip)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--reps", type=int, default=1 if common.quick() else 3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument(
        "--scale",
        type=float,
        default=0.3 if common.quick() else 1.0,
        help="times the default steps",
    )
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        globals()[f"child_{args.child}"]()
        return

    common.use_scratch_store()
    os.environ.setdefault("DIST_NOTEBOOK_STORE", str(Path(tempfile.mkdtemp()) / "runs.sqlite"))
    modes = args.modes.split(",")
    models = args.models.split(",")
    nb = Notebook() if {"dist_train", "nbdistributed"} & set(modes) else None
    raw: dict[str, dict[str, list[float]]] = {m: {k: [] for k in modes} for m in models}
    errors: dict[str, dict[str, str]] = {m: {} for m in models}
    threads: dict[str, set[int]] = {}
    try:
        for rep in range(args.reps):
            for model in models:
                cfg = {
                    "model": model,
                    "steps": int(STEPS[model] * args.scale),
                    "warmup": args.warmup,
                    "batch": args.batch,
                }
                for mode in common.interleave(modes, rep):
                    if mode in errors[model]:
                        continue
                    try:
                        if mode in ("dist_train", "nbdistributed"):
                            assert nb is not None
                            res = getattr(nb, mode)(cfg)
                        else:
                            res = run_child(mode, cfg)
                    except Exception as e:
                        errors[model][mode] = str(e)[:300]
                        print(f"rep {rep + 1} {model} {mode}: FAILED {e}", flush=True)
                        continue
                    threads.setdefault(mode, set()).add(res["threads"])
                    raw[model][mode].append(samples_per_s(res))
                    print(
                        f"rep {rep + 1} {model} {mode}: {raw[model][mode][-1]:,.0f} samples/s",
                        flush=True,
                    )
    finally:
        if nb is not None:
            nb.stop()

    results: dict[str, Any] = {}
    for model in models:
        results[model] = {}
        ref = raw[model].get("torchrun")
        ref_med = common.stats(ref)["median"] if ref else None
        for mode in modes:
            s = common.stats(raw[model][mode])
            if mode in errors[model]:
                s["error"] = errors[model][mode]
            if ref_med and s.get("median"):
                s["vs_torchrun"] = s["median"] / ref_med
            results[model][mode] = s
    common.write_result(
        "throughput",
        {
            "what": "samples/s (all ranks) of the same loop; 2 ranks (single: 1 process), "
            "1 thread each",
            "config": {
                "reps": args.reps,
                "warmup": args.warmup,
                "batch_per_rank": args.batch,
                "steps": {m: int(STEPS[m] * args.scale) for m in models},
                "threads_seen": {k: sorted(v) for k, v in threads.items()},
            },
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
