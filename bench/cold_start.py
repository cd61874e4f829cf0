"""Cold start: from nothing to the first completed collective, 2 and 4 ranks.

    python -m bench run cold_start                 # 2 and 4 ranks, 3 repetitions
    python -m bench run cold_start --ranks 2 --reps 1

Each measurement is a fresh child process (so that importing IPython, torch and the
tool counts alike for everyone); the clock starts just before the child is spawned and
stops when the child reports that one ``all_reduce`` over every rank has completed.
Tearing down is not timed. The ways, run interleaved (A B C D E, E D C B A, ...):

  dist_notebook   IPython shell: ``%load_ext dist_notebook``, ``%dist_cluster start -n N
                  --cpu``, then ``%%dist`` with one all_reduce (engines forked from the
                  fork server that ``%load_ext`` starts)
  dist_notebook_spawn  the same with the fork server switched off
                  (DIST_NOTEBOOK_FORKSERVER=0): each engine a fresh process
  dist_notebook_next_cell  ``%load_ext`` in one cell, ``%dist_cluster start`` in the next
                  once the fork server has its imports done (a user typing): timed from
                  ``%dist_cluster start``, not from the spawn
  dist_notebook_warm  the same start with a spare kept warm (DIST_NOTEBOOK_WARM=1, after a
                  first start and stop of the spec), timed from ``%dist_cluster start`` once
                  the spare is ready, not from the spawn
  torchrun        ``torchrun --standalone --nproc-per-node N`` on a script that creates the
                  gloo group and does one all_reduce
  accelerate      IPython shell: ``notebook_launcher(fn, num_processes=N, use_port=free)``
                  (forks the kernel; fn creates the gloo group and does one all_reduce)
  nbdistributed   IPython shell: ``%load_ext nbdistributed``, ``%dist_init -n N``, then
                  ``%%distributed`` with one all_reduce
  ipyparallel     ``ipp.Cluster(n=N).start_and_connect_sync()``, then by hand: rank env vars
                  and ``init_process_group`` on each engine, then one all_reduce

Writes ``bench/results/cold_start.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import time
from typing import Any

from bench import common

METHODS = [
    "dist_notebook",
    "dist_notebook_spawn",
    "dist_notebook_next_cell",
    "dist_notebook_warm",
    "torchrun",
    "accelerate",
    "nbdistributed",
    "ipyparallel",
]
ALL_REDUCE = "t = torch.ones(1); dist.all_reduce(t); assert int(t.item()) == world_size"


def done(extra: dict[str, Any] | None = None) -> None:
    print("BENCH_RESULT " + json.dumps({"done": time.time(), **(extra or {})}), flush=True)


# ---- children: each does the whole start and prints the moment the collective is done ----


def child_dist_notebook(n: int) -> None:
    ip = common.shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    common.quietly(ip.run_line_magic, "dist_cluster", f"start -n {n} --cpu")
    common.quietly(ip.run_cell_magic, "dist", "", ALL_REDUCE)
    done()
    common.quietly(ip.run_line_magic, "dist_cluster", "stop")


def child_dist_notebook_spawn(n: int) -> None:
    os.environ["DIST_NOTEBOOK_FORKSERVER"] = "0"
    child_dist_notebook(n)


def child_dist_notebook_next_cell(n: int) -> None:
    from dist_notebook.cluster import forkserver

    ip = common.shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    server = forkserver.current()
    if server is None or not server.wait_ready(120):
        raise RuntimeError("the fork server did not start")
    since = time.time()
    common.quietly(ip.run_line_magic, "dist_cluster", f"start -n {n} --cpu")
    common.quietly(ip.run_cell_magic, "dist", "", ALL_REDUCE)
    done({"since": since})
    common.quietly(ip.run_line_magic, "dist_cluster", "stop")


def child_dist_notebook_warm(n: int) -> None:
    """Warm: the kernel keeps a spare (DIST_NOTEBOOK_WARM=1, cluster/pool.py) after a
    first cluster of the spec stopped; timed from ``%dist_cluster start`` to the first
    all_reduce, once the spare is ready (what a user sees on a later start)."""
    os.environ["DIST_NOTEBOOK_WARM"] = "1"
    from dist_notebook.cluster import pool

    ip = common.shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    common.quietly(ip.run_line_magic, "dist_cluster", f"start -n {n} --cpu")
    common.quietly(ip.run_line_magic, "dist_cluster", "stop")
    deadline = time.time() + 120
    while not any(s.state.value == "ready" for s in pool.spares()) and time.time() < deadline:
        time.sleep(0.05)
    since = time.time()
    common.quietly(ip.run_line_magic, "dist_cluster", f"start -n {n} --cpu")
    common.quietly(ip.run_cell_magic, "dist", "", ALL_REDUCE)
    done({"since": since})
    common.quietly(ip.run_line_magic, "dist_cluster", "stop")
    pool.clear()


def child_torchrun_rank() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    world_size = dist.get_world_size()
    t = torch.ones(1)
    dist.all_reduce(t)
    assert int(t.item()) == world_size
    if dist.get_rank() == 0:
        done()
    dist.destroy_process_group()


def _accelerate_fn() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    assert int(t.item()) == dist.get_world_size()
    if dist.get_rank() == 0:
        done()
    dist.destroy_process_group()


def child_accelerate(n: int) -> None:
    common.shell()  # the notebook's kernel: notebook_launcher forks it
    import torch  # noqa: F401  (a notebook has torch imported before launching)
    from accelerate import notebook_launcher

    notebook_launcher(_accelerate_fn, num_processes=n, use_port=str(common.free_port()))


def child_nbdistributed(n: int) -> None:
    ip = common.shell()
    ip.run_line_magic("load_ext", "nbdistributed")
    _, out = common.quietly(ip.run_line_magic, "dist_init", f"-n {n}")
    if "Successfully started" not in out.stdout:
        raise RuntimeError(out.stdout[-2000:])
    nbdistributed_wait_ready(ip, n)
    _, out = common.quietly(ip.run_cell_magic, "distributed", "", ALL_REDUCE + "\nprint('REDUCED')")
    if out.stdout.count("REDUCED") < 1 or "Error" in out.stdout:
        raise RuntimeError(out.stdout[-2000:])
    done()
    nbdistributed_stop(ip)


def nbdistributed_wait_ready(ip: Any, n: int, limit: float = 120.0) -> float:
    """%dist_init returns after a fixed 2 s sleep, before the workers have connected, and a
    message sent to a worker that has not connected yet is dropped (ZMQ ROUTER): the cell
    then waits 30 s and fails. A user re-runs it; here the workers are probed with a status
    request every 0.25 s until all answer, the earliest moment a cell can succeed."""
    comm = ip.magics_manager.registry["DistributedMagic"]._comm_manager
    t0 = time.time()
    while time.time() - t0 < limit:
        try:
            comm.send_to_ranks(list(range(n)), "get_status", None, timeout=0.25)
            return time.time() - t0
        except TimeoutError:
            continue
    raise RuntimeError(f"nbdistributed workers did not answer within {limit:.0f} s")


def nbdistributed_stop(ip: Any) -> None:
    """Stop nbdistributed's workers. Its ``%dist_shutdown`` acts on class attributes that
    ``%dist_init`` never sets (it sets them on the instance), so it leaves the workers
    running; here the instance's own managers are told to stop, then the processes."""
    magic = ip.magics_manager.registry["DistributedMagic"]
    comm, procs = magic._comm_manager, magic._process_manager
    if comm is not None:
        # A worker leaves its loop on "shutdown" without answering: the wait always times out.
        with contextlib.suppress(TimeoutError):
            comm.send_to_all("shutdown", {}, timeout=1.0)
        comm.shutdown()
    if procs is not None:
        common.quietly(procs.shutdown)
    common.quietly(ip.run_line_magic, "dist_shutdown", "")  # resets its cell mode


def _hand_setup(rank: int, world: int, port: int) -> int:
    import os

    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    import torch.distributed as dist

    dist.init_process_group("gloo")
    return dist.get_rank()


def child_ipyparallel(n: int) -> None:
    import ipyparallel as ipp

    cluster = ipp.Cluster(n=n, log_level=40)
    rc = cluster.start_and_connect_sync()
    try:
        rc.wait_for_engines(n, timeout=120)
        port = common.free_port()
        ids = sorted(rc.ids)[:n]
        ars = [rc[e].apply_async(_hand_setup, rank, n, port) for rank, e in enumerate(ids)]
        for ar in ars:
            ar.get(timeout=120)
        rc[ids].execute(
            "import torch, torch.distributed as dist\nworld_size = dist.get_world_size()\n"
            + ALL_REDUCE,
            block=True,
        )
        done()
    finally:
        cluster.stop_cluster_sync()


# ---- the parent: interleaved fresh children ----


def one(method: str, n: int, timeout: float) -> dict[str, Any]:
    env = common.child_env(threads=None)
    if method == "torchrun":
        cmd = common.torchrun_cmd("cold_start", n, "--child", "torchrun_rank")
    else:
        cmd = common.module_cmd("cold_start", "--child", method, "--n", str(n))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
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
        common.end_group(proc)  # SIGTERM first: the child's finally stops its cluster
        out, err = proc.communicate()
        return {"error": f"no collective within {timeout:.0f} s", "stderr": err[-1500:]}
    finally:
        # Children may leave grandchildren behind on failure; end this child's group
        # only (and, interrupted, the child first, so it stops what it started).
        common.end_group(proc)
    try:
        res = common.result_line(out)
    except RuntimeError:
        tail = (err or out).strip().splitlines()
        return {
            "error": f"exit {proc.returncode}: " + (tail[-1] if tail else "no output"),
            "stderr": err[-3000:],
        }
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # A warm start counts from the start the user asks for, not from the spawn. CPU: every
    # process of the child's tree that was waited for, the untimed stop included.
    return {"seconds": res["done"] - res.get("since", t0), "cpu_seconds": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--reps", type=int, default=1 if common.quick() else 3)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--timeout", type=float, default=150)
    parser.add_argument("--child")
    parser.add_argument("--n", type=int)
    args = parser.parse_args()

    if args.child:
        if args.child == "torchrun_rank":
            child_torchrun_rank()
        else:
            globals()[f"child_{args.child}"](args.n)
        return

    methods = args.methods.split(",")
    sizes = [int(x) for x in args.ranks.split(",")]
    raw: dict[str, dict[str, list[float]]] = {str(n): {m: [] for m in methods} for n in sizes}
    cpu: dict[str, dict[str, list[float]]] = {str(n): {m: [] for m in methods} for n in sizes}
    errors: dict[str, dict[str, str]] = {str(n): {} for n in sizes}
    for rep in range(args.reps):
        for n in sizes:
            for m in common.interleave(methods, rep):
                if m in errors[str(n)]:
                    continue  # a way that cannot run here fails the same way every time
                r = one(m, n, args.timeout)
                if "error" in r:
                    errors[str(n)][m] = r["error"]
                    print(
                        f"rep {rep + 1} n={n} {m}: FAILED {r['error']}\n{r.get('stderr', '')}",
                        flush=True,
                    )
                else:
                    raw[str(n)][m].append(r["seconds"])
                    cpu[str(n)][m].append(r["cpu_seconds"])
                    print(
                        f"rep {rep + 1} n={n} {m}: {r['seconds']:.2f} s "
                        f"({r['cpu_seconds']:.1f} CPU s)",
                        flush=True,
                    )
                time.sleep(0.5)

    results: dict[str, Any] = {}
    for n in sizes:
        key = str(n)
        ref = raw[key].get("torchrun")
        ref_med = common.stats(ref)["median"] if ref else None
        results[key] = {}
        for m in methods:
            s = common.stats(raw[key][m])
            if m in errors[key]:
                s["error"] = errors[key][m]
            if ref_med and s.get("median"):
                s["vs_torchrun"] = s["median"] / ref_med
            if cpu[key][m]:
                s["cpu_seconds"] = common.stats(cpu[key][m])
            results[key][m] = s
    common.write_result(
        "cold_start",
        {
            "what": "seconds from spawning a fresh process to the first completed all_reduce "
            "over all ranks (gloo, CPU)",
            "reps": args.reps,
            "results": results,
        },
    )
    for n in sizes:
        for m in methods:
            s = results[str(n)][m]
            print(
                f"n={n} {m:14s} "
                + (f"median {s['median']:.2f} s" if s.get("median") else s.get("error", "-"))
            )


if __name__ == "__main__":
    main()
