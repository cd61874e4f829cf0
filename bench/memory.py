"""Resident memory per rank after start, against a bare ``import torch`` process.

    python -m bench run memory                          # 2 ranks

  dist_notebook   each engine after ``%dist_cluster start -n 2 --cpu`` (torch imported,
                  gloo group created, rank namespace ready); plus every process the
                  cluster started (controller, engines), summed
  nbdistributed   each worker after ``%dist_init -n 2`` answers (torch, gloo group)
  bare torch      ``python -c "import torch; sleep"``
  bare torch+gloo a bare process that also created a 1-rank gloo group

RSS and USS (memory only that process holds) from psutil, after a 1 s settle; the bare
processes run N at a time, like the ranks, so that shared library pages count alike. Writes
``bench/results/memory.json``.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from bench import common

MIB = 2**20
BARE = "import torch, sys, time; print('ready', flush=True); time.sleep(600)"
BARE_GLOO = (
    "import os, torch, torch.distributed as dist, sys, time\n"
    "os.environ.update(RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1',\n"
    "                  MASTER_PORT=sys.argv[1])\n"
    "dist.init_process_group('gloo'); print('ready', flush=True); time.sleep(600)"
)


def mem(pid: int) -> dict[str, float]:
    import psutil

    info = psutil.Process(pid).memory_full_info()
    return {"rss_mib": info.rss / MIB, "uss_mib": info.uss / MIB}


def children_total() -> dict[str, float]:
    import psutil

    total = {"rss_mib": 0.0, "uss_mib": 0.0, "processes": 0}
    for p in psutil.Process().children(recursive=True):
        try:
            m = mem(p.pid)
        except psutil.Error:
            continue
        total["rss_mib"] += m["rss_mib"]
        total["uss_mib"] += m["uss_mib"]
        total["processes"] += 1
    return total


def bare(code: str, argv: list[list[str]]) -> dict[str, float]:
    """One bare process per rank, alive together (as the ranks of a tool are): USS counts
    only pages no other process maps, so a lone process would look bigger than it is."""
    procs = [
        subprocess.Popen(
            [common.PY, "-c", code, *args],
            stdout=subprocess.PIPE,
            text=True,
            env=common.child_env(threads=None),
        )
        for args in argv
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            proc.stdout.readline()
        time.sleep(1)
        return mean([mem(proc.pid) for proc in procs])
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}


def main() -> None:
    n = 2
    common.use_scratch_store()
    os.environ["PATH"] = common.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    results: dict[str, Any] = {}
    results["bare_torch"] = bare(BARE, [[] for _ in range(n)])
    results["bare_torch_gloo"] = bare(BARE_GLOO, [[str(common.free_port())] for _ in range(n)])

    ip = common.shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    ip.run_line_magic("load_ext", "nbdistributed")

    from dist_notebook.magics.session import Session

    common.quietly(ip.run_line_magic, "dist_cluster", f"start -n {n} --cpu")
    try:
        time.sleep(1)
        cluster = Session.for_shell(ip).cluster
        assert cluster is not None
        per = [mem(r.pid) for r in cluster.ranks]
        results["dist_notebook"] = {**mean(per), "ranks": per, "all_processes": children_total()}
    finally:
        common.quietly(ip.run_line_magic, "dist_cluster", "stop")

    try:
        _, out = common.quietly(ip.run_line_magic, "dist_init", f"-n {n}")
        if "Successfully started" not in out.stdout:
            raise RuntimeError(out.stdout.strip().splitlines()[-1])
        from cold_start import nbdistributed_stop, nbdistributed_wait_ready

        nbdistributed_wait_ready(ip, n)
        time.sleep(1)
        manager = ip.magics_manager.registry["DistributedMagic"]._process_manager
        per = [mem(p.pid) for p in manager.processes]
        results["nbdistributed"] = {**mean(per), "ranks": per, "all_processes": children_total()}
        nbdistributed_stop(ip)
    except Exception as e:
        results["nbdistributed"] = {"error": f"{type(e).__name__}: {e}"}

    base = results["bare_torch"]
    for k in ("dist_notebook", "nbdistributed", "bare_torch_gloo"):
        if "uss_mib" in results[k]:
            results[k]["uss_vs_bare"] = results[k]["uss_mib"] / base["uss_mib"]
            results[k]["rss_minus_bare_mib"] = results[k]["rss_mib"] - base["rss_mib"]
    for k, v in results.items():
        if "rss_mib" in v:
            print(f"{k:16s} RSS {v['rss_mib']:7.1f} MiB  USS {v['uss_mib']:7.1f} MiB")
    common.write_result(
        "memory",
        {
            "what": f"resident memory per rank after start ({n} ranks, CPU) "
            "vs a bare import-torch process",
            "ranks": n,
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
