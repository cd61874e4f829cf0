"""GPU check on one machine: NCCL cluster start, GPU metrics, and GPT-small in bf16
through %%dist_train against the same loop under torchrun. Prints markdown tables.

    python -m bench.gpu_check              # needs a CUDA GPU
    python -m bench.gpu_check --reps 3     # interleaved rounds (default 3)

Each round runs, in turn (rotated every round so drift falls on all):
  torchrun     ``torchrun --nproc-per-node 1 bench/gpt_loop.py`` (the reference)
  dist_train   ``%%dist_train`` with report() every step and the NVML sampler (2 Hz)
  no_nvml      the same with the sampler stopped, so the sampler's own cost shows
Start: ``%dist_cluster start`` to ready (the group's first all_reduce done), against
torchrun to the first completed all_reduce of a script that does only that.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIRST_COLLECTIVE = """
import time, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(0)
x = torch.ones(1, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
print("READY", time.time(), flush=True)
dist.destroy_process_group()
"""


def torchrun(script: str, env: dict | None = None) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])
    return out.stdout


def torchrun_gpt() -> dict:
    for line in torchrun(os.path.join(HERE, "gpt_loop.py")).splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError("torchrun gave no RESULT line")


def torchrun_start(folder: str) -> float:
    script = os.path.join(folder, "first.py")
    with open(script, "w") as f:
        f.write(FIRST_COLLECTIVE)
    t0 = time.time()
    for line in torchrun(script).splitlines():
        if line.startswith("READY "):
            return float(line.split()[1]) - t0
    raise RuntimeError("no READY line")


def gpu_records(ip) -> tuple[int, int, dict]:
    run = ip.magics_manager.registry["TrainMagics"].last_run
    records = run.metrics.records(0)
    sampled = [r.gpu for r in records if r.gpu]
    return len(records), len(sampled), (sampled[-1] if sampled else {})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    from IPython.testing.globalipapp import start_ipython

    folder = tempfile.mkdtemp()
    os.environ.setdefault("DIST_NOTEBOOK_STORE", os.path.join(folder, "runs.sqlite"))
    ip = start_ipython()
    ip.run_line_magic("load_ext", "dist_notebook")
    starts = {"dist_cluster": [], "torchrun": [torchrun_start(folder)]}
    t0 = time.perf_counter()
    ip.run_line_magic("dist_cluster", "start")
    starts["dist_cluster"].append(time.perf_counter() - t0)
    cluster = ip.magics_manager.registry["ClusterMagics"].session.cluster
    ranks = [(r.rank, r.device, r.backend) for r in cluster.ranks]
    ip.run_cell_magic(
        "dist", "", open(os.path.join(HERE, "gpt_loop.py")).read().split("if __name__")[0]
    )
    cells = {
        "dist_train": "gpt_result = train_gpt(report)",
        "no_nvml": "from dist_notebook.engine import gpu as _gpu\n_gpu.stop_sampler()\n"
        "gpt_result = train_gpt(report)",
    }
    results: dict[str, list[dict]] = {"torchrun": [], "dist_train": [], "no_nvml": []}
    sampling = []
    order = list(results)
    for rep in range(args.reps):
        for side in order[rep % 3 :] + order[: rep % 3]:
            if side == "torchrun":
                results[side].append(torchrun_gpt())
                continue
            ip.run_cell_magic("dist_train", "--name gpt-small", cells[side])
            results[side].append(ip.run_line_magic("dist_pull", "gpt_result"))
            if side == "dist_train":
                sampling.append(gpu_records(ip))
    ip.run_line_magic("dist_cluster", "stop")
    starts["torchrun"].append(torchrun_start(folder))
    report(results, starts, ranks, sampling)


def report(results: dict, starts: dict, ranks: list, sampling: list) -> None:
    med = {k: statistics.median(r["samples_per_s"] for r in v) for k, v in results.items()}
    mfu = {k: statistics.median(r["mfu"] for r in v) for k, v in results.items()}
    print(f"\nranks: {ranks}; GPT-small {results['torchrun'][0]['params'] / 1e6:.1f} M params\n")
    print("| side | samples/s median | runs | vs torchrun | MFU |")
    print("|---|---:|---|---:|---:|")
    for side, runs in results.items():
        values = ", ".join(f"{r['samples_per_s']:.1f}" for r in runs)
        print(
            f"| {side} | {med[side]:.1f} | {values} | {med[side] / med['torchrun']:.3f} "
            f"| {mfu[side]:.1%} |"
        )
    print(f"\nNVML sampler cost: {1 - med['dist_train'] / med['no_nvml']:+.2%} of samples/s")
    for n, sampled, last in sampling:
        print(f"records {n}, with gpu {sampled}, last sample {last}")
    print("\n| start to first collective (s) | runs |")
    print("|---|---|")
    for side, values in starts.items():
        print(f"| {side} | {', '.join(f'{v:.2f}' for v in values)} |")
    print("GPU_JSON " + json.dumps({"results": results, "starts": starts, "sampling": sampling}))


if __name__ == "__main__":
    main()
