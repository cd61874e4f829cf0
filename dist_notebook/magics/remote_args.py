"""The flags of ``%dist_cluster start`` for clusters beyond one machine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ..cluster import ClusterConfigError
from ..cluster.engines import strategy_for
from ..cluster.hosts import HostsError, listen_ip
from ..cluster.rayengines.strategy import RAY_FLAGS
from ..cluster.spec import ClusterSpec, remote_spec
from .args import MagicParser, positive_int

if TYPE_CHECKING:
    from ..cluster.cluster import Progress
    from ..cluster.kind import Cluster


def add_remote_flags(p: MagicParser) -> None:
    p.add_argument(
        "--interface",
        help="listen on this network interface's address, e.g. eth1 (default: --ip, else loopback)",
    )
    p.add_argument(
        "--hosts",
        help="ssh/mpi: HOST[:N],HOST[:N] ranks per host, e.g. n1:2,n2:2 (no default: ssh and mpi "
        "need it; N default 1)",
    )
    p.add_argument("--nodes", type=positive_int, help="slurm: number of nodes (default: 1)")
    p.add_argument(
        "--gpus-per-node",
        type=positive_int,
        help="remote: GPUs (= ranks) per node (default: none, CPU ranks)",
    )
    p.add_argument("--partition", help="slurm: partition (default: Slurm's default partition)")
    p.add_argument("--time", help="slurm: time limit, e.g. 1:00:00 (default: the partition's)")
    p.add_argument("--account", help="slurm: account to charge (default: your default account)")
    p.add_argument(
        "--address",
        metavar="ADDR",
        help="ray: the Ray cluster, HOST:PORT or ray://HOST:PORT (default: RAY_ADDRESS, else "
        "a Ray cluster running here)",
    )
    p.add_argument(
        "--gpus-per-rank",
        type=positive_int,
        metavar="K",
        help="ray: GPUs of each rank's Ray bundle (default: none, CPU ranks)",
    )
    placement = p.add_mutually_exclusive_group()
    placement.add_argument(
        "--pack",
        dest="placement",
        action="store_const",
        const="pack",
        help="ray: every rank on one Ray node, STRICT_PACK (default: PACK, as few nodes as fit)",
    )
    placement.add_argument(
        "--spread",
        dest="placement",
        action="store_const",
        const="spread",
        help="ray: the ranks over as many Ray nodes as can take them, SPREAD (default: PACK)",
    )


def local_ip(args: Any) -> str:
    try:
        return listen_ip(args.ip, args.interface)
    except HostsError as e:
        raise UsageError(str(e)) from None


def refuse_foreign_flags(args: Any) -> None:
    """A Ray flag given to a launcher without flags of its own: a UsageError naming it."""
    if getattr(strategy_for(args.launcher), "spec_from_flags", None) is not None:
        return
    for flag, dest in RAY_FLAGS:
        if getattr(args, dest, None):
            raise UsageError(f"{flag} is an option of Ray clusters: add --launcher ray")


def remote_cluster_spec(args: Any) -> Any:
    if strategy_for(args.launcher).on_this_machine:
        flag = "--hosts" if args.hosts else "--nodes"
        raise UsageError(f"{flag} needs a remote launcher: add --launcher ssh, mpi or slurm")
    # A launcher with flags of its own (--launcher ray) builds its spec from them.
    own = getattr(strategy_for(args.launcher), "spec_from_flags", None)
    try:
        return ClusterSpec(**own(args)) if own is not None else remote_spec(args)
    except (HostsError, ClusterConfigError) as e:
        raise UsageError(str(e)) from None


def scale_action(
    cluster: Cluster | None, count: int | None, progress: Progress, hosts: str | None = None
) -> Cluster:
    """``%dist_cluster scale N [--hosts H:n,...]``: the cluster with N ranks, or a
    UsageError naming the fix."""
    from ..cluster.scale import ScaleError

    if count is None and not hosts:
        raise UsageError(
            "%dist_cluster scale needs the new number of ranks, e.g. scale 4 "
            "(ssh, mpi: or the new layout, scale --hosts h1:2,h2:2)"
        )
    if cluster is None or cluster.state.value in ("new", "stopped"):
        raise UsageError("no cluster to scale: start one with %dist_cluster start")
    cluster.progress = progress
    try:
        took = cluster.scale_sync(count or 0, hosts)
    except ScaleError as e:
        raise UsageError(str(e)) from None
    print(
        f"cluster {cluster.id}: {cluster.n} ranks in {took:.1f} s; the process group is new: "
        "run the cell that builds your DDP model again"
    )
    return cluster
