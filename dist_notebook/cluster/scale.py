"""``%dist_cluster scale N`` between cells: add or remove ranks, renumber, regroup.

Growing starts N - n engines through the cluster's launcher (they boot with ranks n..N-1
and import torch while they register); shrinking stops the engines of ranks N..n-1
through it. Either way every engine is then given its place again (RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR: see ``placement``) and the default process group is
re-created on a fresh store port (rank 0 binds port 0), so no old connection survives.

What the user's state does: surviving ranks keep their Python namespace, new ranks start
empty. A DDP model holds the old group, so it must be built again after scaling: run
the cell that defines the model (``model = DDP(Net())``), whose constructor broadcasts
rank 0's parameters to every rank; new ranks need the cells that define the classes
first. The global batch stays the same when the per-rank batch is derived from it
(``batch = global_batch // world_size``): ``world_size`` is updated on every rank.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from .loop import run_sync
from .placement import ranks_across_hosts


class ScaleError(RuntimeError):
    """The cluster cannot be scaled as asked; the message names the fix."""


def check(cluster: Any, n: int) -> None:
    if cluster.state.value != "ready":
        raise ScaleError(
            f"the cluster is {cluster.state.value}: scale a ready cluster "
            "(run %dist_cluster restart first)"
        )
    if cluster.spec.launcher != "local":
        raise ScaleError(
            f"scale changes local engines only; with --launcher {cluster.spec.launcher} "
            "stop and start again with the new --hosts or --nodes"
        )
    if cluster.spec.gpus and n > len(cluster.spec.gpus):
        raise ScaleError(
            f"scale {n}: the cluster has GPUs {','.join(map(str, cluster.spec.gpus))}, one per "
            "rank; stop and start with --gpus listing more"
        )


async def scale(cluster: Any, n: int) -> float:
    """Make *cluster* have *n* ranks; return the seconds it took."""
    check(cluster, n)
    t0 = time.perf_counter()
    old = cluster.n
    if n == old:
        return 0.0
    cluster.state = type(cluster.state)("restarting")
    cluster._store_state("restarting")
    try:
        if n > old:
            ids = await _grow(cluster, n)
        else:
            ids = await _shrink(cluster, n)
        cluster.ranks, cluster.master_addr = await ranks_across_hosts(
            cluster.client, ids, type(cluster.ranks[0])
        )
        cluster.progress(f"re-creating the process group on {n} ranks")
        await cluster.init_group()
    except BaseException:
        cluster.state = type(cluster.state)("failed")
        cluster._store_state("failed")
        raise
    cluster._ready(t0)
    return time.perf_counter() - t0


def scale_sync(cluster: Any, n: int) -> float:
    return run_sync(scale(cluster, n))


def _resize(cluster: Any, n: int) -> None:
    spec = cluster.spec
    gpus = spec.gpus[:n] if spec.gpus else ()
    cluster.spec = dataclasses.replace(spec, n=n, gpus=gpus)


async def _grow(cluster: Any, n: int) -> list[int]:
    client = cluster.client
    before = set(client.ids)
    kept = [r.engine_id for r in cluster.ranks]
    added = n - cluster.n
    _resize(cluster, n)
    await cluster._start_engines(added, n - added)
    await cluster._wait_for_engines(before, added)
    return kept + sorted(set(client.ids) - before)


async def _shrink(cluster: Any, n: int) -> list[int]:
    leaving = [r for r in cluster.ranks if r.rank >= n]
    cluster.progress(f"stopping rank{'s' if len(leaving) > 1 else ''} {leaving[0].rank}..")
    pids = {r.pid for r in leaving}
    for set_id in list(cluster._engine_sets):
        engine_set = cluster._ipp.engines.get(set_id)
        for identifier, launcher in list(getattr(engine_set, "launchers", {}).items()):
            if getattr(launcher, "pid", None) in pids:
                # Buried first: a stopped engine is not a dead rank.
                cluster._buried.add((set_id, identifier))
                await launcher.stop()
    _resize(cluster, n)
    cluster.ranks = [r for r in cluster.ranks if r.rank < n]
    return [r.engine_id for r in cluster.ranks]
