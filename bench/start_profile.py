"""Where a cold start's time and CPU go: the timeline of ``%dist_cluster start`` and the CPU
seconds of every process it started, at the moment the first all_reduce has completed.

    python -m bench run start_profile            # 2 and 4 ranks, one fresh child each
    python -m bench run start_profile --ranks 4

Each size runs in a fresh child process (as ``bench/cold_start.py``): an IPython shell,
``%load_ext dist_notebook``, the start with its progress lines time-stamped, then one
all_reduce on every rank. The child prints, from its own spawn: when the shell and the
extension were ready, each progress line, the collective; then the CPU seconds (user +
system, from the kernel's accounting) of the kernel, the controller (with its scheduler
processes) and each engine (with any child). Writes ``bench/results/start_profile.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from typing import Any

from bench import common

ALL_REDUCE = "t = torch.ones(1); dist.all_reduce(t); assert int(t.item()) == world_size"


def child(n: int, spawned: float) -> None:
    import psutil

    events: list[tuple[float, str]] = []

    def mark(what: str) -> None:
        events.append((round(time.time() - spawned, 3), what))

    mark("python started")
    ip = common.shell()
    mark("IPython shell ready")
    ip.run_line_magic("load_ext", "dist_notebook")
    mark("%load_ext dist_notebook done")
    import threading

    from dist_notebook.cluster import forkserver

    server = forkserver.current()

    def server_ready() -> None:
        if server is not None and server.wait_ready():
            mark("fork server ready")

    # The server's imports run beside the start: when they end is part of the timeline.
    threading.Thread(target=server_ready, daemon=True).start()
    from dist_notebook.cluster.cluster import DistCluster
    from dist_notebook.cluster.spec import ClusterSpec

    cluster = DistCluster(ClusterSpec(n=n), progress=mark)
    cluster.start_sync()
    mark("start returned (group created)")
    client: Any = cluster.client
    client[cluster.engine_ids()].execute(
        "import torch, torch.distributed as dist\nworld_size = dist.get_world_size()\n"
        + ALL_REDUCE,
        block=True,
    )
    mark("first all_reduce done")
    cpu: dict[str, float] = {}
    me = psutil.Process()
    engines = {r.pid: r.rank for r in cluster.ranks}
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            args = " ".join(proc.cmdline())
            parent = proc.ppid()
        except psutil.NoSuchProcess:
            continue
        if proc.pid == me.pid:
            name = "kernel"
        elif proc.pid in engines:
            name = f"engine rank {engines[proc.pid]}"
        elif parent in engines:
            name = f"engine rank {engines[parent]} (child)"
        elif server is not None and proc.pid == server.pid:
            name = "fork server"
        elif "controller" in args:
            name = "controller (+ schedulers)"
        else:
            name = "other"
        cpu[name] = round(cpu.get(name, 0.0) + times.user + times.system, 2)
    cluster.stop_sync()
    events.sort()
    print("BENCH_RESULT " + json.dumps({"events": events, "cpu_s": cpu}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--child", type=int)
    parser.add_argument("--spawned", type=float)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.spawned)
        return
    results: dict[str, Any] = {}
    for n in [int(x) for x in args.ranks.split(",")]:
        t0 = time.time()
        done = subprocess.run(
            common.module_cmd("start_profile", "--child", str(n), "--spawned", repr(t0)),
            env=common.child_env(threads=None),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=common.ROOT,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        res = common.result_line(done.stdout)
        results[str(n)] = res
        print(f"\n{n} ranks (seconds from spawning the kernel):")
        for at, what in res["events"]:
            print(f"  {at:6.2f}  {what}")
        print("  CPU seconds: " + ", ".join(f"{k} {v}" for k, v in sorted(res["cpu_s"].items())))
        print(f"  CPU seconds in all: {sum(res['cpu_s'].values()):.1f}")
    common.write_result(
        "start_profile",
        {
            "what": "timeline of a cold start and CPU seconds per process at the first "
            "completed all_reduce (2 CPU ranks and 4)",
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
