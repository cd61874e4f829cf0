"""The %dist_run hang of 2026-12-01, as a bench: one unchanged DDP script run again and
again with two busy processes beside the ranks, by %dist_run and by torchrun, interleaved.

    python bench/script_hang.py              # 50 runs a side
    python bench/script_hang.py --runs 10    # (or BENCH_QUICK=1) fewer

The script (30 DDP steps, an all_gather, destroy_process_group(), the model freed as
main() returns) froze a rank in about one run in three before engine/pgrelease.py. Each
run is bounded (60 s for %dist_run, torchrun's own process tree killed at 120 s); a run
over the bound counts as a hang and ends the bench for that side. Prints a markdown table
(median, p95, max per run; hangs) and writes ``bench/results/script_hang.json``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    child_env,
    cpu_hogs,
    md_table,
    quick,
    quietly,
    shell,
    stats,
    torchrun_cmd,
    use_scratch_store,
    write_result,
)

SCRIPT = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(30):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(out, torch.tensor([loss.item()]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""
DIST_RUN_BOUND_S = 60.0
TORCHRUN_BOUND_S = 120.0


def dist_run_once(ip: Any, script: Path) -> float | None:
    """One %dist_run; its time, or None when it did not end within the bound."""
    box: dict[str, float] = {}

    def run() -> None:
        t0 = time.perf_counter()
        quietly(ip.run_line_magic, "dist_run", str(script))
        box["took"] = time.perf_counter() - t0

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DIST_RUN_BOUND_S)
    return box.get("took")


def torchrun_once(script: Path) -> float | None:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        torchrun_cmd(script, 2),
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        proc.wait(TORCHRUN_BOUND_S)
    except subprocess.TimeoutExpired:
        import os
        import signal

        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None
    return time.perf_counter() - t0 if proc.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10 if quick() else 50)
    parser.add_argument("--hogs", type=int, default=2)
    args = parser.parse_args()
    use_scratch_store()
    script = Path(tempfile.mkdtemp(prefix="dist-bench-hang-")) / "ddp_gather.py"
    script.write_text(SCRIPT)
    ip = shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    quietly(ip.run_line_magic, "dist_cluster", "start -n 2 --cpu")
    times: dict[str, list[float]] = {"dist-notebook %dist_run": [], "torchrun --standalone": []}
    hung = {name: 0 for name in times}
    try:
        with cpu_hogs(args.hogs):
            for i in range(args.runs):
                order = list(times) if i % 2 == 0 else list(reversed(times))
                for name in order:
                    if hung[name]:
                        continue
                    took = (
                        dist_run_once(ip, script)
                        if name.startswith("dist")
                        else torchrun_once(script)
                    )
                    if took is None:
                        hung[name] += 1
                        print(f"run {i}: {name} did not end within its bound", flush=True)
                    else:
                        times[name].append(took)
                print(f"run {i + 1}/{args.runs}", flush=True)
    finally:
        if not any(hung.values()):
            quietly(ip.run_line_magic, "dist_cluster", "stop")
    rows = []
    for name, values in times.items():
        s = stats(values) if values else {}
        rows.append(
            [
                name,
                len(values),
                hung[name],
                f"{s.get('median', 0):.2f}",
                f"{s.get('p90', 0):.2f}",
                f"{max(values, default=0):.2f}",
            ]
        )
    print(f"\n{args.runs} runs a side, {args.hogs} CPU hogs beside the ranks\n")
    print(md_table(["side", "runs ended", "hangs", "median s", "p90 s", "max s"], rows))
    write_result(
        "script_hang", {"runs": args.runs, "hogs": args.hogs, "times": times, "hung": hung}
    )


if __name__ == "__main__":
    main()
