"""Where a cold many-rank start's time goes, phase by phase and engine by engine.

    python -m bench run start_timeline --ranks 64 [--reps 1] [--sides ours,torchrun]

Each start is a fresh child process (as ``bench/cold_start.py``): an IPython shell,
``%load_ext dist_notebook`` (which starts the fork server), ``DistCluster.start`` with its
progress lines time-stamped, then one all_reduce on every rank. Besides
``bench/start_profile.py``'s timeline it records, in seconds from the child's spawn:

- each fork request the kernel sent to the fork server and its reply (the engine's pid);
- each engine's own "Completed registration" line (its log), and the controller's
  "finished registering" line for it, against the moment the kernel's client counted it
  (the progress lines): a gap there is the kernel not seeing a registered engine;
- the group's creation (progress line to ``start`` returning) and the first all_reduce,
  with how many ranks had torch._dynamo imported by then (the warm import DDP needs:
  ``engine.group._warm_after_start``, or the fork server's own before it forked);
- CPU seconds of the kernel, fork server, controller and engines at the all_reduce.

``torchrun`` is ``bench/cold_start.py``'s torchrun child at the same size, interleaved.
Writes ``bench/results/start_timeline.json``.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import statistics
import subprocess
import threading
import time
from typing import Any

from bench import common

ALL_REDUCE = (
    "import sys, torch, torch.distributed as dist\n"
    "t = torch.ones(1); dist.all_reduce(t); assert int(t.item()) == dist.get_world_size()\n"
    "_dynamo_loaded = 'torch._dynamo' in sys.modules\n"
)
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) ")


def _log_times(path: str, pattern: str) -> list[tuple[float, str]]:
    """(epoch seconds, line) of each line of *path* matching *pattern* (local time)."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            if re.search(pattern, line):
                m = STAMP.match(line)
                if m:
                    when = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
                    out.append((when.timestamp(), line.strip()))
    return out


def child(n: int, spawned: float) -> None:
    import psutil

    events: list[tuple[float, str]] = []
    spawns: list[tuple[float, float]] = []

    def at() -> float:
        return round(time.time() - spawned, 3)

    def mark(what: str) -> None:
        events.append((at(), what))

    mark("python started")
    ip = common.shell()
    mark("IPython shell ready")
    ip.run_line_magic("load_ext", "dist_notebook")
    mark("%load_ext dist_notebook done (fork server started)")
    from dist_notebook.cluster import forkserver

    server = forkserver.current()
    original = forkserver.ForkServer.spawn

    def timed_spawn(self: Any, *a: Any, **k: Any) -> int:
        sent = at()
        pid = original(self, *a, **k)
        spawns.append((sent, at()))
        return pid

    forkserver.ForkServer.spawn = timed_spawn  # type: ignore[method-assign]

    def server_ready() -> None:
        if server is not None and server.wait_ready():
            mark("fork server ready")

    threading.Thread(target=server_ready, daemon=True).start()
    from dist_notebook.cluster.cluster import DistCluster
    from dist_notebook.cluster.spec import ClusterSpec

    cluster = DistCluster(ClusterSpec(n=n, start_timeout=600.0), progress=mark)
    cluster.start_sync()
    mark("start returned (group created)")
    client: Any = cluster.client
    view = client[cluster.engine_ids()]
    view.execute(ALL_REDUCE, block=True)
    mark("first all_reduce done")
    dynamo = sum(bool(x) for x in view.pull("_dynamo_loaded", block=True))
    cpu: dict[str, float] = {}
    me = psutil.Process()
    engines = {r.pid for r in cluster.ranks}
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            args = " ".join(proc.cmdline())
        except psutil.NoSuchProcess:
            continue
        if proc.pid == me.pid:
            name = "kernel"
        elif proc.pid in engines:
            name = "engines"
        elif server is not None and proc.pid == server.pid:
            name = "fork server"
        elif "controller" in args:
            name = "controller"
        else:
            name = "other"
        cpu[name] = round(cpu.get(name, 0.0) + times.user + times.system, 2)
    logs = os.path.join(cluster.profile_dir, "log")
    registered = []
    for path in glob.glob(os.path.join(logs, "ipengine-*.log")):
        registered += [t - spawned for t, _ in _log_times(path, "Completed registration")]
    controller = []
    for path in glob.glob(os.path.join(logs, "ipcontroller-*.log")):
        controller += [t - spawned for t, _ in _log_times(path, "finished registering engine")]
    cluster.stop_sync()
    events.sort()
    print(
        "BENCH_RESULT "
        + json.dumps(
            {
                "events": events,
                "spawns": spawns,
                "engine_registered": sorted(registered),
                "controller_registered": sorted(controller),
                "dynamo_loaded_ranks": dynamo,
                "cpu_s": cpu,
                "load": list(os.getloadavg()),
            }
        ),
        flush=True,
    )


def summary(r: dict[str, Any]) -> dict[str, Any]:
    ev = dict((w, t) for t, w in r["events"])
    seen = [t for t, w in r["events"] if w.startswith("engines registered") and " 0/" not in w]
    spawns = r["spawns"]
    gaps = [b - a for a, b in spawns]
    out = {
        "shell": ev.get("IPython shell ready"),
        "load_ext": ev.get("%load_ext dist_notebook done (fork server started)"),
        "fork server ready": ev.get("fork server ready"),
        "first fork sent": spawns[0][0] if spawns else None,
        "last fork answered": spawns[-1][1] if spawns else None,
        "fork round trip median (ms)": statistics.median(gaps) * 1e3 if gaps else None,
        "first engine registered (its log)": min(r["engine_registered"], default=None),
        "last engine registered (its log)": max(r["engine_registered"], default=None),
        "last engine registered (controller)": max(r["controller_registered"], default=None),
        "kernel saw the first": min(seen, default=None),
        "kernel saw the last": max(seen, default=None),
        "group creation began": next(
            (t for t, w in r["events"] if w.startswith("creating the")), None
        ),
        "start returned": ev.get("start returned (group created)"),
        "first all_reduce done": ev.get("first all_reduce done"),
        "ranks with torch._dynamo at the all_reduce": r["dynamo_loaded_ranks"],
        "cpu_s": r["cpu_s"],
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--sides", default="ours,torchrun")
    parser.add_argument("--child", type=int)
    parser.add_argument("--spawned", type=float)
    parser.add_argument("--out", default="start_timeline")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.spawned)
        return
    from bench import cold_start

    results: dict[str, list[Any]] = {s: [] for s in args.sides.split(",")}
    for rep in range(args.reps):
        for side in common.interleave(list(results), rep):
            if side == "torchrun":
                r = cold_start.one("torchrun", args.ranks, timeout=120 + 6 * args.ranks)
                results[side].append(r)
                print(f"torchrun {args.ranks}: {r.get('seconds')} s", flush=True)
                continue
            t0 = time.time()
            done = subprocess.run(
                common.module_cmd(
                    "start_timeline", "--child", str(args.ranks), "--spawned", repr(t0)
                ),
                env=common.child_env(threads=None),
                capture_output=True,
                text=True,
                timeout=120 + 6 * args.ranks,
                cwd=common.ROOT,
            )
            if done.returncode != 0:
                raise RuntimeError(done.stderr[-3000:])
            res = common.result_line(done.stdout)
            res["summary"] = summary(res)
            results[side].append(res)
            print(f"{side} {args.ranks} ranks, rep {rep + 1} (s from the kernel's spawn):")
            for k, v in res["summary"].items():
                print(f"  {k}: {v}", flush=True)
    common.write_result(args.out, {"ranks": args.ranks, "reps": args.reps, "results": results})


if __name__ == "__main__":
    main()
