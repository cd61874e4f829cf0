"""The rank environment of an engine, decided before torch is imported.

Local engines get ``DIST_NOTEBOOK_RANK`` and ``DIST_NOTEBOOK_LOCAL_RANK`` from our
launcher; engines started by MPI or Slurm take theirs from the launcher's own
variables. ``DIST_NOTEBOOK_DEVICES`` lists the GPUs of one host: the engine keeps only
the one at its local rank in ``CUDA_VISIBLE_DEVICES``, so it sees exactly one GPU.
"""

from __future__ import annotations

from collections.abc import MutableMapping

_RANK_VARS = ("DIST_NOTEBOOK_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_LOCAL_VARS = (
    "DIST_NOTEBOOK_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
)
_SIZE_VARS = ("DIST_NOTEBOOK_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def _first(env: MutableMapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            return value
    return None


def apply_rank_environment(env: MutableMapping[str, str]) -> None:
    """Set RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and CUDA_VISIBLE_DEVICES in *env*.

    Does nothing when no launcher variable names a rank (a plain ipengine), so the
    cluster can still assign ranks afterwards by registration order.
    """
    rank = _first(env, _RANK_VARS)
    if rank is None:
        return
    local_rank = _first(env, _LOCAL_VARS) or rank
    env["RANK"] = rank
    env["LOCAL_RANK"] = local_rank
    size = _first(env, _SIZE_VARS)
    if size is not None:
        env["WORLD_SIZE"] = size
    env.setdefault("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", "1"))
    devices = env.get("DIST_NOTEBOOK_DEVICES", "")
    if devices:
        ids = devices.split(",")
        env["CUDA_VISIBLE_DEVICES"] = ids[int(local_rank) % len(ids)]
    elif env.get("DIST_NOTEBOOK_CPU") == "1":
        # CPU ranks must not grab a GPU that happens to be visible.
        env["CUDA_VISIBLE_DEVICES"] = ""
