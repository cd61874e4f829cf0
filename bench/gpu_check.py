"""GPU check on one machine: NCCL cluster start, device per rank, and GPT-small in bf16
through %%dist_train against the same loop under torchrun. Prints a markdown table.

    python bench/gpu_check.py        # needs a CUDA GPU
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def plain_run() -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "1",
            os.path.join(HERE, "gpt_loop.py"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])


def main() -> None:
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "dist_notebook")
    t0 = time.perf_counter()
    ip.run_line_magic("dist_cluster", "start")
    start_s = time.perf_counter() - t0
    session = ip.magics_manager.registry["ClusterMagics"].session
    cluster = session.cluster
    ranks = [(r.rank, r.device, r.backend) for r in cluster.ranks]
    ip.run_cell_magic(
        "dist",
        "",
        "x = torch.ones(4, device=device) * (rank + 1)\ndist.all_reduce(x)\n"
        "assert x.is_cuda and x[0].item() == world_size * (world_size + 1) / 2\n",
    )
    ip.run_cell_magic(
        "dist", "", open(os.path.join(HERE, "gpt_loop.py")).read().split("if __name__")[0]
    )
    rows = []
    for _ in range(2):
        ip.run_cell_magic(
            "dist_train", "--name gpt-small --steps 50", "gpt_result = train_gpt(report)"
        )
        notebook = ip.run_line_magic("dist_pull", "gpt_result")
        plain = plain_run()
        rows.append((notebook, plain))
    ip.run_line_magic("dist_cluster", "stop")
    print(f"\nstart: {start_s:.1f} s; ranks: {ranks}\n")
    print(
        "| run | samples/s %%dist_train | samples/s torchrun | ratio "
        "| MFU %%dist_train | MFU torchrun | step ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for i, (a, b) in enumerate(rows):
        print(
            f"| {i} | {a['samples_per_s']:.1f} | {b['samples_per_s']:.1f} | "
            f"{a['samples_per_s'] / b['samples_per_s']:.3f} | {a['mfu']:.1%} | {b['mfu']:.1%} | "
            f"{a['step_ms']:.1f} / {b['step_ms']:.1f} |"
        )
    print(f"\nparams: {rows[0][0]['params'] / 1e6:.1f} M")


if __name__ == "__main__":
    main()
