"""Ray start: ``%dist_cluster start --launcher ray`` vs local ranks vs Ray Train.

    python -m bench run ray_start                  # 2 CPU ranks, 5 repetitions
    python -m bench run ray_start --reps 1

A Ray head on loopback (``ray start --head --num-cpus 4 --node-ip-address 127.0.0.1``,
its ports Ray's own choice, its files and auth token in a private temporary folder) is
started once, before the measurements, and ended after them: what a user of a running
Ray cluster pays. Each measurement is a fresh child process (for ray and local, IPython,
torch and the tool imported alike); the clock starts before the child is spawned and
stops when one ``all_reduce`` over every rank has completed. The ways, interleaved
(A B C, C B A, ...):

  ray     ``%load_ext dist_notebook``, ``%dist_cluster start -n N --cpu --launcher ray
          --address HEAD``, ``%%dist`` with one all_reduce: the child connects to Ray,
          reserves the placement group and starts one actor per rank, each spawning its
          engine
  local   the same with the default launcher (engines forked from the fork server)
  trainer Ray Train: the child (no IPython, no dist_notebook) imports ray and connects
          to the head (``ray.init(address=HEAD)``), then ``TorchTrainer(loop,
          scaling_config=ScalingConfig(num_workers=N, use_gpu=False),
          run_config=RunConfig(storage_path=<private temp folder>)).fit()``; Ray Train
          starts the worker actors and their gloo process group, the loop does the same
          all_reduce. The clock stops at the all_reduce's completion (the latest wall
          time over the ranks, taken after it and reported from the loop), not at
          ``fit()``'s return, so the three ways measure the same thing; ``fit()``'s
          return is recorded too (``trainer_fit_return`` in the JSON, a line under the
          table): it adds the run's teardown and its result files

Needs ``ray[train]`` (``pip install 'dist-notebook[bench]'``): without it the trainer
way is listed as not run. Writes ``bench/results/ray_start.json`` and ``ray_start.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import common

METHODS = ["ray", "local", "trainer"]
ALL_REDUCE = "t = torch.ones(1); dist.all_reduce(t); assert int(t.item()) == world_size"
HEAD_START_S = 150.0


def done() -> None:
    print("BENCH_RESULT " + json.dumps({"done": time.time()}), flush=True)


def child(method: str, n: int, address: str) -> None:
    ip = common.shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    flags = f"start -n {n} --cpu" + (
        f" --launcher ray --address {address}" if method == "ray" else ""
    )
    _, out = common.quietly(ip.run_line_magic, "dist_cluster", flags)
    _, out = common.quietly(ip.run_cell_magic, "dist", "", ALL_REDUCE)
    done()
    common.quietly(ip.run_line_magic, "dist_cluster", "stop")


def train_loop() -> None:
    """Ray Train's worker loop: the all_reduce, then its completion's wall time (the
    latest over the ranks, gathered after the timestamps are taken), reported by every
    rank as Ray Train asks; rank 0 attaches a one-file checkpoint, since the result's
    metrics are those of the latest checkpoint."""
    import ray.train
    import torch
    import torch.distributed as dist

    world_size = dist.get_world_size()
    t = torch.ones(1)
    dist.all_reduce(t)
    assert int(t.item()) == world_size
    stamp = torch.tensor([time.time()], dtype=torch.float64)
    dist.all_reduce(stamp, op=dist.ReduceOp.MAX)
    metrics = {"done": float(stamp.item())}
    if dist.get_rank() != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "done.json").write_text(json.dumps(metrics))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


def trainer_child(n: int, address: str) -> None:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    storage = tempfile.mkdtemp(prefix="bench-ray-train-")
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        trainer = TorchTrainer(
            train_loop,
            torch_config=TorchConfig(backend="gloo"),
            scaling_config=ScalingConfig(num_workers=n, use_gpu=False),
            run_config=RunConfig(storage_path=storage, name="ray_start"),
        )
        result = trainer.fit()
        returned = time.time()
        if result.error is not None:
            raise result.error
        line = {"done": result.metrics["done"], "fit_returned": returned}
        print("BENCH_RESULT " + json.dumps(line), flush=True)
        ray.shutdown()
    finally:
        shutil.rmtree(storage, ignore_errors=True)


def ray_env(temp: str) -> dict[str, str]:
    """A Ray process's environment: no address, files in *temp*, the run's own token."""
    env = common.child_env(threads=None)
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_AUTH_TOKEN", None)
    env.update(
        RAY_USAGE_STATS_ENABLED="0",
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # keep 127.0.0.1 (cluster/rayconnect.py)
        RAY_TMPDIR=temp,
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=os.path.join(temp, "auth_token"),
    )
    return env


@contextmanager
def ray_head() -> Iterator[tuple[str, dict[str, str]]]:
    """A loopback Ray head of 4 CPUs: its address and the environment that reaches it."""
    temp = tempfile.mkdtemp(prefix="bench-ray-")
    env = ray_env(temp)
    fd = os.open(env["RAY_AUTH_TOKEN_PATH"], os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    cmd = [os.path.join(common.BIN_DIR, "ray"), "start", "--head", "--block", "--num-cpus", "4"]
    cmd += ["--node-ip-address", "127.0.0.1", "--port", "0", "--dashboard-host", "127.0.0.1"]
    cmd += ["--dashboard-port", "0", "--ray-client-server-port", str(common.free_port())]
    cmd += ["--temp-dir", temp, "--disable-usage-stats"]
    log = open(os.path.join(temp, "head.log"), "wb")  # noqa: SIM115  closed below
    head = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    address_file = Path(temp) / "ray_current_cluster"
    deadline = time.monotonic() + HEAD_START_S
    try:
        while not (address_file.exists() and address_file.read_text().strip()):
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Ray head did not start (exit {head.poll()})")
            time.sleep(0.5)
        yield address_file.read_text().strip(), env
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(30)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait(30)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def one(method: str, n: int, address: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    cmd = common.module_cmd("ray_start", "--child", method, "--n", str(n), "--address", address)
    t0 = time.time()
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=common.ROOT,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        common.end_group(proc)
        out, err = proc.communicate()
        return {"error": f"no collective within {timeout:.0f} s", "stderr": err[-1500:]}
    finally:
        common.end_group(proc)
    try:
        line = common.result_line(out)
    except RuntimeError:
        return {"error": f"exit {proc.returncode}", "stderr": (err or out)[-3000:]}
    r = {"seconds": line["done"] - t0}
    if "fit_returned" in line:
        r["fit_return"] = line["fit_returned"] - t0
    return r


def table(
    results: dict[str, Any],
    n: int,
    reps: int,
    fit_return: dict[str, Any] | None = None,
    not_run: dict[str, str] | None = None,
) -> str:
    """The docs' table (bench/results/ray_start.md): median and range of each way, the
    medians' ratios to local, fit()'s return and the ways not run."""
    rows = []
    for m, s in results.items():
        span = f"{common.fmt(s.get('min'), 2)}-{common.fmt(s.get('max'), 2)} s"
        rows.append([m, n, common.fmt(s.get("median"), 2, " s"), span, s.get("n", 0)])
    text = common.md_table(["way", "ranks", "median", "range", "runs"], rows)
    local = results.get("local", {})
    ratios = [
        f"{m} / local {results[m]['median'] / local['median']:.2f}x"
        for m in ("ray", "trainer")
        if local.get("n") and results.get(m, {}).get("n")
    ]
    if ratios:
        text += f"\n\nMedians: {', '.join(ratios)} ({reps} runs each, interleaved)."
    if fit_return and fit_return.get("n"):
        text += (
            f" The trainer's clock stops at the all_reduce's completion; its fit() returned"
            f" at {common.fmt(fit_return['median'], 2, ' s')} (median)."
        )
    for m, why in (not_run or {}).items():
        text += f"\n\n{m}: not run ({why})."
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--reps", type=int, default=1 if common.quick() else 5)
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("--child")
    parser.add_argument("--address", default="")
    args = parser.parse_args()
    if args.child == "trainer":
        trainer_child(args.n, args.address)
        return
    if args.child:
        child(args.child, args.n, args.address)
        return

    methods = list(METHODS)
    not_run: dict[str, str] = {}
    try:
        import ray.train.torch  # noqa: F401
    except ImportError:
        methods.remove("trainer")
        not_run["trainer"] = "ray.train does not import here: pip install 'ray[train]'"
    raw: dict[str, list[float]] = {m: [] for m in methods}
    fit_return: list[float] = []
    errors: dict[str, str] = {}
    with ray_head() as (address, env):
        for rep in range(args.reps):
            for m in common.interleave(methods, rep):
                r = one(m, args.n, address, env, args.timeout)
                if "error" in r:
                    errors[m] = r["error"]
                    print(f"rep {rep + 1} {m}: FAILED {r['error']}\n{r['stderr']}", flush=True)
                else:
                    raw[m].append(r["seconds"])
                    if "fit_return" in r:
                        fit_return.append(r["fit_return"])
                    print(f"rep {rep + 1} {m}: {r['seconds']:.2f} s", flush=True)
                time.sleep(0.5)
    results = {m: common.stats(v) for m, v in raw.items()}
    fit_stats = common.stats(fit_return)
    text = table(results, args.n, args.reps, fit_stats, not_run)
    print(text)
    (common.RESULTS / "ray_start.md").write_text(text + "\n")
    common.write_result(
        "ray_start",
        {
            "ranks": args.n,
            "reps": args.reps,
            "results": results,
            "trainer_fit_return": fit_stats,
            "errors": errors,
            "not_run": not_run,
            "ray": common.package_version("ray"),
        },
    )


if __name__ == "__main__":
    main()
