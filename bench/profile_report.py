"""Where report()'s cost goes: py-spy on the kernel and on rank 0 during a training run.

    python -m bench run profile_report --seconds 12   # writes bench/results/profile_*.txt

Starts the same notebook as ``bench/train_overhead.py`` (2 CPU ranks, 1 thread each),
runs its MLP loop as ``%%dist_train`` (mode a: report() every step and the dashboard;
d: no dashboard; e: no report(); c: plain ``%%dist``) for long enough, and samples the
kernel process and rank 0's engine with ``py-spy record --format raw`` (every thread,
idle frames dropped). Prints, per process, the share of samples by thread and the top
functions by own samples: shares stay meaningful on a loaded machine, times do not.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from bench import common
from bench import train_overhead as to
from dist_notebook.magics.session import Session

RESULTS = common.RESULTS


def spy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    cmd = [
        exe,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(int(seconds)),
        "--rate",
        "200",
        "--format",
        "raw",
        "--threads",
        "--output",
        str(out),
        "--nonblocking",
    ]
    # py-spy's own complaints (a process gone, no permission) go to a log beside the output.
    log = open(out.with_suffix(".log"), "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


# Leaf frames of a thread that waits (py-spy counts a wait in C as active): left out.
WAITING = (
    "Condition.wait",
    "Poller.poll",
    "Popen._wait",
    "select (",
    "Event.wait",
    "EpollSelector.select",
    "wait_pid_pidfd_open",
    "_watch (dist_notebook/engine/parent",
)


def summarise(raw: Path, top: int = 25) -> str:
    """Share of busy samples per thread and per function (py-spy's raw format)."""
    threads: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        if frames[-1].startswith(WAITING) or "sleep" in frames[-1]:
            continue
        total += n
        threads[frames[0]] += n
        leaves[frames[-1]] += n
        for frame in set(frames[1:]):
            inclusive[frame] += n
    lines = [f"{total} busy samples", "", "by thread:"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in threads.most_common(8)]
    lines += ["", "own samples, top functions:"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in leaves.most_common(top)]
    lines += ["", "inclusive, top functions:"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="a", choices="acde")
    parser.add_argument("--seconds", type=float, default=12)
    parser.add_argument("--steps", type=int, default=6000, help="long enough to cover the sampling")
    args = parser.parse_args()
    store = tempfile.TemporaryDirectory()
    os.environ["DIST_NOTEBOOK_STORE"] = str(Path(store.name) / "runs.sqlite")
    loop_args = argparse.Namespace(batch=64, warmup=30, steps=args.steps)
    nb = to.Notebook(2)
    cluster = Session.for_shell(nb.ip).cluster
    assert cluster is not None
    rank0 = cluster.ranks[0].pid
    work = Path(store.name)  # py-spy's raw output and logs, removed at the end
    outs = {
        "kernel": work / f"profile_{args.mode}_kernel.raw",
        "rank0": work / f"profile_{args.mode}_rank0.raw",
    }
    RESULTS.mkdir(exist_ok=True)

    def later() -> None:
        threading.Event().wait(3)  # past the run's start
        procs = [
            spy(os.getpid(), args.seconds, outs["kernel"]),
            spy(rank0, args.seconds, outs["rank0"]),
        ]
        for p in procs:
            p.wait(timeout=args.seconds + 60)

    watcher = threading.Thread(target=later)
    watcher.start()
    try:
        code = to.loop_code(loop_args, args.mode in ("a", "d"))
        if args.mode == "c":
            nb.dist(code)
        else:
            nb.train(code, args.steps + 30, dashboard=args.mode == "a")
    finally:
        watcher.join()
        nb.stop()
    for name, raw in outs.items():
        if not raw.exists():
            said = raw.with_suffix(".log").read_text()[-2000:]
            print(f"== {name}: py-spy wrote nothing (the run ended first?)\n{said}")
            continue
        text = summarise(raw)
        (RESULTS / f"profile_{args.mode}_{name}.txt").write_text(text + "\n")
        print(f"== {name} (mode {args.mode})\n{text}\n")
    store.cleanup()


if __name__ == "__main__":
    main()
