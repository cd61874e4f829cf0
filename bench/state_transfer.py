"""State transfer: a state dict from the notebook to every rank, 4 ranks.

    python -m bench run state_transfer                  # 1 GiB, 2 repetitions
    python -m bench run state_transfer --mib 256 --reps 1

  push       ``%dist_push sd``: the kernel's state dict (float32 tensors of 64 MiB each)
             cloudpickled and sent to every rank through ipyparallel
  broadcast  ``%%dist``: rank 0 already holds the state dict; the others allocate empty
             tensors of the same shapes and ``dist.broadcast`` each from rank 0 (gloo)
  pull       ``%dist_pull sd --all``: every rank's state dict back into the kernel (after
             a push; timed apart, not part of the push/broadcast ratio)

Timed in the kernel around the magic, interleaved; the ranks' copies are dropped
between rounds. Peak memory of the machine (used RAM plus shared memory, sampled every
50 ms: /dev/shm pages count as "shared", not "used", and a push on one host goes through
them) is recorded for each side. Before starting, the size is checked against the
available memory (the old path peaked at about 8x the size: the dict and its pickle in
the kernel, the copy sent to rank 0, each rank's received bytes and unpickled copy); if
1 GiB does not fit with a margin, the largest power of two that does is used and the
JSON says so.
Writes ``bench/results/state_transfer.json``.
"""

from __future__ import annotations

import argparse
import gc
import threading
import time
from typing import Any

from bench import common

RANKS = 4
TENSOR_MIB = 64
# Peak RAM of a push, in units of the state dict's size: the kernel holds the dict and
# its pickle, each rank the message and the tensors, the controller the queued messages.
PUSH_FACTOR = 8  # measured: +3.3 to +5.8 GiB for 512 MiB-1 GiB since push broadcasts from rank 0
MARGIN_GIB = 2.5

BROADCAST = """
import torch, torch.distributed as dist
if rank != 0:
    sd = {{f"w{{i}}": torch.empty({rows}, 4096) for i in range({count})}}
for k in sorted(sd):
    dist.broadcast(sd[k], 0)
"""


class PeakRam:
    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        self.base = self._now()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self._now())

    def _now(self) -> int:
        memory = self.psutil.virtual_memory()
        return int(memory.used + memory.shared)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return (self.peak - self.base) / 2**30


def choose_size(asked_mib: int) -> tuple[int, str | None]:
    import psutil

    avail = psutil.virtual_memory().available / 2**30
    size = asked_mib
    while size > TENSOR_MIB and size / 1024 * PUSH_FACTOR + MARGIN_GIB > avail:
        size //= 2
    if size != asked_mib:
        return size, (
            f"{asked_mib} MiB x ~{PUSH_FACTOR} (kernel, controller, {RANKS} ranks) did not fit in "
            f"{avail:.1f} GiB available; used {size} MiB"
        )
    return size, None


def pull_back(
    ip: Any,
    times: dict[str, list[float]],
    peaks: dict[str, list[float]],
    count: int,
    rows: int,
    rep: int,
) -> None:
    """%dist_pull sd --all: every rank's copy back into the kernel, checked, dropped."""
    gc.collect()
    peak = PeakRam()
    t0 = time.perf_counter()
    back = common.quietly(ip.run_line_magic, "dist_pull", "sd --all")[0]
    dt = time.perf_counter() - t0
    peaks["pull"].append(peak.stop())
    last = f"w{count - 1}"
    if any(float(sd[last][rows - 1, 4095]) != float(count - 1) for sd in back.values()):
        raise RuntimeError("pull: wrong values back in the kernel")
    del back
    gc.collect()
    times["pull"].append(dt)
    print(
        f"rep {rep + 1} pull --all: {dt:.2f} s, peak +{peaks['pull'][-1]:.1f} GiB RAM", flush=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mib", type=int, default=1024, help="state dict size, MiB (default 1 GiB)"
    )
    parser.add_argument("--reps", type=int, default=1 if common.quick() else 3)
    args = parser.parse_args()

    import torch

    size, why = choose_size(args.mib)
    count = max(1, size // TENSOR_MIB)
    rows = TENSOR_MIB * 2**20 // 4 // 4096
    print(
        f"state dict: {count} tensors of {rows}x4096 float32 = {count * TENSOR_MIB} MiB"
        + (f" ({why})" if why else "")
    )

    common.use_scratch_store()
    ip = common.shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    common.quietly(ip.run_line_magic, "dist_cluster", f"start -n {RANKS} --cpu")
    times: dict[str, list[float]] = {"push": [], "broadcast": [], "pull": []}
    peaks: dict[str, list[float]] = {"push": [], "broadcast": [], "pull": []}
    try:
        sd = {f"w{i}": torch.full((rows, 4096), float(i)) for i in range(count)}
        ip.user_ns["sd"] = sd
        check = f"float(sd['w{count - 1}'][{rows - 1}, 4095]) == {float(count - 1)}"
        for rep in range(args.reps):
            for side in common.interleave(["push", "broadcast"], rep):
                # Start each round from the same place: no copy on the ranks but rank 0's.
                common.quietly(ip.run_cell_magic, "dist", "", "sd = None\nimport gc; gc.collect()")
                if side == "broadcast":
                    common.quietly(
                        ip.run_cell_magic,
                        "dist",
                        "--ranks 0",
                        f"sd = {{f'w{{i}}': torch.full(({rows}, 4096), float(i)) "
                        f"for i in range({count})}}",
                    )
                gc.collect()
                time.sleep(0.5)
                peak = PeakRam()
                t0 = time.perf_counter()
                if side == "push":
                    common.quietly(ip.run_line_magic, "dist_push", "sd")
                else:
                    common.quietly(
                        ip.run_cell_magic, "dist", "", BROADCAST.format(rows=rows, count=count)
                    )
                dt = time.perf_counter() - t0
                peaks[side].append(peak.stop())
                ok = common.quietly(ip.run_line_magic, "dist_pull", f"{check} --all")[0]
                if not all(ok.values()):
                    raise RuntimeError(f"{side}: wrong values on the ranks: {ok}")
                times[side].append(dt)
                print(
                    f"rep {rep + 1} {side}: {dt:.2f} s, peak +{peaks[side][-1]:.1f} GiB RAM",
                    flush=True,
                )
                if side == "push":
                    pull_back(ip, times, peaks, count, rows, rep)
        common.quietly(ip.run_cell_magic, "dist", "", "sd = None\nimport gc; gc.collect()")
    finally:
        common.quietly(ip.run_line_magic, "dist_cluster", "stop")

    mib = count * TENSOR_MIB
    results: dict[str, Any] = {}
    for side in times:
        s = common.stats(times[side])
        s["gib_per_s_to_all"] = mib / 1024 * RANKS / s["median"]
        s["peak_ram_gib"] = max(peaks[side])
        results[side] = s
    results["push"]["vs_broadcast"] = results["push"]["median"] / results["broadcast"]["median"]
    common.write_result(
        "state_transfer",
        {
            "what": f"seconds to get a {mib} MiB state dict onto {RANKS} ranks "
            f"(float32, {count} tensors)",
            "ranks": RANKS,
            "mib": mib,
            "asked_mib": args.mib,
            "size_note": why,
            "reps": args.reps,
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
