"""``%dist_cluster scale N`` between cells: add or remove ranks, renumber, regroup.

``scale`` is the same for every launcher: the cluster's engines strategy
(``cluster/engines``) plans the change and adds or removes the engines through its
launcher (ipyparallel's launchers and ours in ``launchers``), never by a scheduler of our
own; then every rank is placed and the group re-created here. What each launcher does
(``engines/local.py``, ``engines/remote.py`` with ``ssh.py``, ``mpi.py``, ``slurm.py``):

- local: N - n more engines start with ranks n..N-1; shrinking stops the engines of
  ranks N..n-1.
- ssh: growing fills the least-loaded host of those the cluster was started with (ties:
  the first in ``--hosts`` order), one rank at a time; shrinking takes from the most
  loaded one (ties: the last), its highest local rank first. ``scale --hosts h1:2,h2:3``
  gives the new layout instead (a host left out ends with no rank; a new host is added
  after the others). The new engines are one more engine set over ssh, told their node
  and their local ranks after the host's present ones; a leaving engine is stopped by
  its own launcher.
- mpi: the same rule; each host that grows gets one more ``mpiexec`` (local ranks and
  GPUs after the host's present ones); a leaving engine is shut down through the
  controller, and an ``mpiexec`` left with no engine is stopped.
- slurm: growing submits one more job for the extra ranks, with the cluster's options
  (partition, time limit, account, GPUs per node; at most ``--nodes`` nodes); shrinking
  removes the newest ranks first (those of the last job), and a job left with no engine
  is cancelled.

Every engine is then given its place again (RANK, NODE_RANK, LOCAL_RANK,
LOCAL_WORLD_SIZE, WORLD_SIZE, MASTER_ADDR: see ``placement``; ranks by node, then local
rank, hosts keeping their order) and the thread count of the new layout (OMP_NUM_THREADS,
MKL_NUM_THREADS, ``torch.set_num_threads``: the cores over the ranks on the host, or
``--threads``), and the default process group is re-created on a fresh store port (rank 0
binds port 0), so no old connection survives.

What the user's state does: surviving ranks keep their Python namespace, new ranks start
empty. A DDP model holds the old group, so it must be built again after scaling: run
the cell that defines the model (``model = DDP(Net())``), whose constructor broadcasts
rank 0's parameters to every rank; new ranks need the cells that define the classes
first. The global batch stays the same when the per-rank batch is derived from it
(``batch = global_batch // world_size``): ``world_size`` is updated on every rank.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..engine.rankenv import set_threads
from ..protocol import ClusterState
from . import limits
from .errors import ClusterError, GrowError, ScaleError  # noqa: F401 (scale's errors)
from .facts import RankInfo
from .placement import PlacementError, host_counts, ranks_across_hosts
from .spec import ClusterConfigError

if TYPE_CHECKING:
    import ipyparallel as ipp

    from .cluster import DistCluster
    from .engines import Resized
    from .health import Health
    from .ippengines import Engines
    from .owner import ClusterOwner
    from .spec import ClusterSpec


class Scalable(Protocol):
    """What scale and the engines strategies' ``plan_scale``/``resize`` ask of a
    cluster (``DistCluster`` is one): nothing else of it is touched."""

    master_addr: str | None
    progress: Callable[[str], None]
    owner: ClusterOwner
    health: Health

    @property
    def n(self) -> int: ...

    @property
    def spec(self) -> ClusterSpec: ...

    @property
    def state(self) -> ClusterState: ...

    @property
    def ranks(self) -> list[RankInfo]: ...

    def update(
        self, *, spec: ClusterSpec | None = None, ranks: list[RankInfo] | None = None
    ) -> None: ...

    @property
    def engines(self) -> Engines: ...

    def require_client(self) -> ipp.Client: ...

    def engine_env(self, rank_offset: int = 0) -> dict[str, str]: ...

    def move(self, new: ClusterState) -> bool: ...

    async def init_group(self) -> None: ...

    def ready_after(self, t0: float) -> Any: ...


def check(cluster: Scalable, n: int, hosts: str | None = None) -> None:
    spec = cluster.spec
    try:
        cluster.owner.refuse_during_run(f"cannot scale to {n} ranks")
        if n > cluster.n and spec.engines.on_this_machine:
            # (remote specs are not re-validated: their hosts' layout follows the scale)
            limits.check_capacity(dataclasses.replace(spec, n=n), asked="scale")
    except (ClusterError, ClusterConfigError) as e:
        raise ScaleError(str(e)) from None
    if cluster.state.value != "ready":
        raise ScaleError(
            f"the cluster is {cluster.state.value}: scale a ready cluster "
            "(run %dist_cluster restart first)"
        )
    refusal = spec.engines.scale_refusal(spec, cluster.n, n, hosts)
    if refusal is not None:
        raise ScaleError(refusal)
    if spec.gpus and n > len(spec.gpus):
        raise ScaleError(
            f"scale {n}: the cluster has GPUs {','.join(map(str, cluster.spec.gpus))}, one per "
            "rank; stop and start with --gpus listing more"
        )


async def scale(cluster: Scalable, n: int, hosts: str | None = None) -> float:
    """Make *cluster* have *n* ranks (ssh, mpi: laid out as *hosts* says, if given);
    return the seconds it took."""
    check(cluster, n, hosts)
    t0 = time.perf_counter()
    engines = cluster.spec.engines
    plan = await engines.plan_scale(cluster, n, hosts)
    if plan is None:
        return 0.0  # the cluster is already so
    cluster.move(ClusterState.RESTARTING)
    try:
        resized = await engines.resize(cluster, plan)
        await _regroup(cluster, resized)
    except BaseException:
        cluster.move(ClusterState.FAILED)
        raise
    cluster.ready_after(t0)
    if resized.failed is not None:
        raise resized.failed  # the cluster is ready again, with the ranks it kept
    return time.perf_counter() - t0


def scale_sync(cluster: DistCluster, n: int, hosts: str | None = None) -> float:
    """``cluster.scale_sync(n, hosts)``, under this module's older name."""
    return cluster.scale_sync(n, hosts)


async def _regroup(cluster: Scalable, resized: Resized) -> None:
    """Every engine of the new layout placed, given its threads, and in a new group."""
    client = cluster.require_client()
    ids = resized.ids
    ranks, cluster.master_addr = await ranks_across_hosts(
        client, ids, RankInfo, resized.previous, resized.kept
    )
    cluster.update(ranks=ranks)
    # Survivors were started for the old layout (a local cluster's cores over its old
    # rank count; a remote host's cores over its old ranks there), and ranks of a Slurm
    # job that shares a node with another job counted only their own job's ranks.
    spec = cluster.spec
    threads = spec.engines.threads(spec)
    await asyncio.wrap_future(client[ids].apply_async(set_threads, threads))
    cluster.progress(f"re-creating the process group on {len(ids)} ranks")
    await cluster.init_group()


def layout(current: dict[str, int], n: int, cap: int = 0) -> dict[str, int]:
    """The hosts' rank counts for *n* ranks (``placement.host_counts``), ScaleError
    naming the fix where *cap* GPUs a host cannot hold them."""
    try:
        return host_counts(current, n, cap)
    except PlacementError as e:
        raise ScaleError(str(e)) from None
