"""The rank environment of an engine: what is known at boot, and the final placement.

At boot (before torch is imported) an engine knows its place on its own host: local
engines get ``DIST_NOTEBOOK_RANK`` / ``DIST_NOTEBOOK_LOCAL_RANK`` from our launcher, SSH
engines ``DIST_NOTEBOOK_LOCAL_RANK`` / ``DIST_NOTEBOOK_LOCAL_SIZE`` / ``DIST_NOTEBOOK_NODE``
from ours, MPI and Slurm engines their scheduler's variables (OMPI_COMM_WORLD_*,
SLURM_PROCID / SLURM_LOCALID / SLURM_NODEID ...). From that it sets LOCAL_RANK,
LOCAL_WORLD_SIZE, one GPU per local rank (CUDA_VISIBLE_DEVICES) and OMP_NUM_THREADS
(the host's cores over its ranks).

Across hosts the kernel decides: ``probe()`` reports host, routable address, interface
and the scheduler's numbers; the kernel orders ranks by (node, local rank) and sends
each engine ``assign()``, which sets RANK, NODE_RANK, WORLD_SIZE, MASTER_ADDR and the
interface gloo/NCCL must use, before the process group is created.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import MutableMapping
from typing import Any

from .. import envvars

_RANK_VARS = (envvars.RANK, "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_LOCAL_VARS = (
    envvars.LOCAL_RANK,
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
)
_LOCAL_SIZE_VARS = (
    envvars.LOCAL_SIZE,
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
    "SLURM_NTASKS_PER_NODE",
)
_NODE_VARS = (envvars.NODE, "SLURM_NODEID")
_SIZE_VARS = (envvars.WORLD_SIZE, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def _first(env: MutableMapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            return value
    return None


def _slurm_local_size(env: MutableMapping[str, str]) -> str | None:
    """Tasks on this node from SLURM_TASKS_PER_NODE ("2(x3),1"), by SLURM_NODEID."""
    spec, node = env.get("SLURM_TASKS_PER_NODE"), env.get("SLURM_NODEID")
    if not spec or node is None:
        return None
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m:
            counts += [int(m.group(1))] * int(m.group(2) or 1)
    index = int(node)
    return str(counts[index]) if index < len(counts) else None


def apply_rank_environment(env: MutableMapping[str, str]) -> None:
    """Set LOCAL_RANK, LOCAL_WORLD_SIZE, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS (and RANK,
    WORLD_SIZE where a launcher names them) in *env*, before torch is imported.

    Does nothing when no launcher variable names a place (a plain ipengine): the
    cluster assigns ranks afterwards from the probes.
    """
    rank = _first(env, _RANK_VARS)
    local_rank = _first(env, _LOCAL_VARS) or rank
    if local_rank is None:
        return
    offset = env.get(envvars.LOCAL_OFFSET, "")
    if offset.isdigit() and local_rank.isdigit():
        # An mpiexec that scale started beside a host's engines: its local ranks (and
        # GPUs) follow theirs.
        local_rank = str(int(local_rank) + int(offset))
    if rank is not None:
        env["RANK"] = rank
    env["LOCAL_RANK"] = local_rank
    size = _first(env, _SIZE_VARS)
    if size is not None:
        env["WORLD_SIZE"] = size
    local_size = _first(env, _LOCAL_SIZE_VARS) or _slurm_local_size(env)
    if local_size is not None:
        env["LOCAL_WORLD_SIZE"] = local_size
    env.setdefault("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", "1"))
    if "OMP_NUM_THREADS" not in env:
        # The kernel cannot know a remote host's cores: share them among its ranks.
        threads = str(max(1, (os.cpu_count() or 1) // max(1, int(env["LOCAL_WORLD_SIZE"]))))
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = threads
    _set_device(env, int(local_rank))


def _set_device(env: MutableMapping[str, str], local_rank: int) -> None:
    devices = env.get(envvars.DEVICES, "")
    per_node = int(env.get(envvars.GPUS_PER_NODE, "0") or 0)
    if not devices and per_node:
        # Slurm narrows CUDA_VISIBLE_DEVICES to the job's GPUs: index into that list.
        given = env.get("CUDA_VISIBLE_DEVICES", "")
        devices = given if given else ",".join(str(i) for i in range(per_node))
        env[envvars.DEVICES] = devices  # the rank table then shows cuda:N
    if devices:
        ids = devices.split(",")
        env["CUDA_VISIBLE_DEVICES"] = ids[local_rank % len(ids)]
    elif env.get(envvars.CPU) == "1":
        # CPU ranks must not grab a GPU that happens to be visible.
        env["CUDA_VISIBLE_DEVICES"] = ""


def _route_to(target: str) -> tuple[str, str]:
    """(local address, interface name) this host uses to reach *target*."""
    import psutil

    family = socket.AF_INET6 if ":" in target else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((target, 9))  # UDP connect sends nothing: it only picks the route
        address = s.getsockname()[0]
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == address for a in addrs):
            return address, name
    return address, ""


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.lstrip("-").isdigit() else None


def probe() -> dict[str, Any]:
    """This engine's host, its address towards the controller, and the launcher's numbers."""
    controller = os.environ.get(envvars.CONTROLLER_IP, "127.0.0.1")
    address, interface = _route_to(controller)
    return {
        "host": socket.gethostname(),
        "address": address,
        "interface": interface,
        "pid": os.getpid(),
        "node": next((v for v in map(_int_env, _NODE_VARS) if v is not None), None),
        "rank_hint": _int_env("RANK"),
        "local_rank": _int_env("LOCAL_RANK"),
        "local_size": _int_env("LOCAL_WORLD_SIZE"),
        "devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def assign(place: dict[str, Any]) -> dict[str, Any]:
    """Take the place the kernel chose: RANK, NODE_RANK, ..., MASTER_ADDR, the interface."""
    for key in ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        os.environ[key] = str(place[key.lower()])
    os.environ["MASTER_ADDR"] = place["master_addr"]
    if place.get("interface"):
        # gloo otherwise listens on what the hostname resolves to (often nothing, or
        # another network); NCCL's bootstrap likewise.
        os.environ["GLOO_SOCKET_IFNAME"] = place["interface"]
        os.environ["NCCL_SOCKET_IFNAME"] = place["interface"]
    from .group import rank_info

    return rank_info()


def origin() -> dict[str, Any]:
    """Where this engine came from (read by ``cluster.scale``): the engine set that
    started it (when scale did), the host as the cluster names it (``--hosts``), and
    its rank in its mpiexec (which places ranks host by host)."""
    return {
        "set": os.environ.get(envvars.ENGINE_SET) or None,
        "host": os.environ.get(envvars.HOST_NAME) or None,
        "mpi_rank": _int_env("OMPI_COMM_WORLD_RANK"),
    }


def set_threads(threads: int | None) -> int:
    """On a rank: take a thread count (OMP_NUM_THREADS, MKL_NUM_THREADS and torch's
    intra-op threads); return it. The cluster sends it after a scale (the new layout);
    an engine forked with torch loaded takes its own at boot.

    *threads* None (remote ranks without ``--threads``): this host's cores over its
    ranks (LOCAL_WORLD_SIZE, just assigned), as the rank's boot worked it out.
    """
    import torch

    if threads is None:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        threads = max(1, (os.cpu_count() or 1) // max(1, local))
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    return threads
