"""torch.distributed on the ranks: which engine holds which rank, then the process group.

ranks, addr = await place(client, ids, spec)          # the rank table
ports = await init_group(client, engine_ids, spec, backend, addr, generation, say)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import ipyparallel as ipp

from .. import envvars
from ..engine import group
from .errors import ClusterError
from .facts import RankInfo
from .placement import PlacementError, local_ranks, ranks_across_hosts

if TYPE_CHECKING:
    from .spec import ClusterSpec


def rank_env(spec: ClusterSpec, stack_dir: str, rank_offset: int = 0) -> dict[str, str]:
    """The environment engines of ranks from *rank_offset* start with: the world's
    size and rank 0's address, threads, devices, then the launcher's own and the
    user's additions (``ClusterSpec.extra_engine_env``)."""
    threads = str(spec.resolved_threads)
    env = {
        envvars.WORLD_SIZE: str(spec.n),
        "WORLD_SIZE": str(spec.n),
        "LOCAL_WORLD_SIZE": str(spec.engines.ranks_per_host(spec)),
        "MASTER_ADDR": spec.ip,
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        envvars.RANK_OFFSET: str(rank_offset),
        "PYTHONUNBUFFERED": "1",
        envvars.STACK_DIR: stack_dir,
    }
    if spec.gpus:
        env[envvars.DEVICES] = ",".join(str(g) for g in spec.gpus)
    else:
        env[envvars.CPU] = "1"
    env = spec.engines.engine_env(spec, env)
    env.update(spec.extra_engine_env)
    return env


async def place(
    client: ipp.Client, ids: list[int], spec: ClusterSpec
) -> tuple[list[RankInfo], str | None]:
    """The rank table of engines *ids*, and rank 0's address where ranks run on other
    hosts (None on this machine: the spec's address)."""
    if not spec.engines.on_this_machine:
        return await ranks_across_hosts(client, ids, RankInfo)
    infos = await asyncio.wrap_future(client[ids].apply_async(group.rank_info))
    try:
        order = local_ranks(infos, spec.n)
    except PlacementError as e:
        raise ClusterError(str(e)) from None
    ranks = [
        RankInfo(rank, ids[at], infos[at]["host"], infos[at]["pid"], infos[at]["device"])
        for at, rank in order
    ]
    return ranks, None


async def init_group(
    client: ipp.Client,
    engine_ids: list[int],
    spec: ClusterSpec,
    backend: str,
    addr: str,
    generation: int,
    progress: Callable[[str], None],
) -> list[int]:
    """(Re-)create the default process group on every rank (*engine_ids*, rank 0
    first); every rank's transport ports, so recovery can sever a stuck collective."""
    progress(f"creating the {backend} process group")
    # Every rank has torch loaded before anyone enters the rendezvous: a replaced
    # rank's import takes ~2 s, 30 s+ on a loaded host, and its peers' rendezvous
    # timeout must count only the group's creation.
    loaded = client[engine_ids].apply_async(group.load_torch)
    try:
        await asyncio.wait_for(asyncio.wrap_future(loaded), spec.start_timeout)
    except ipp.error.CompositeError as e:
        raise ClusterError(
            f"a rank cannot import torch: {_first_error(e)}; check the engines' "
            "environment, then %dist_cluster restart"
        ) from None
    except asyncio.TimeoutError:
        raise ClusterError(
            f"the ranks did not load torch within {spec.start_timeout:.0f} s; the host "
            "may be overloaded: %dist_cluster restart"
        ) from None
    port = await asyncio.wrap_future(
        client[engine_ids[0]].apply_async(group.host_store, addr, spec.timeout)
    )
    ar = client[engine_ids].apply_async(
        group.init_group, addr, port, backend, spec.timeout, generation
    )
    try:
        await asyncio.wait_for(asyncio.wrap_future(ar), spec.timeout + 60)
    except ipp.error.CompositeError as e:
        raise ClusterError(
            f"creating the {backend} process group failed: {_first_error(e)}; "
            "try %dist_cluster restart, or --backend gloo"
        ) from None
    except asyncio.TimeoutError:
        raise ClusterError(
            f"creating the process group took longer than {spec.timeout + 60:.0f} s; "
            "check that every rank can reach rank 0, then %dist_cluster restart"
        ) from None
    return sorted({p for result in ar.get() for p in result.get("ports", [])})


def _first_error(e: ipp.error.CompositeError) -> str:
    first = e.elist[0]
    return f"{first[0]}: {first[1]}"
