"""Ranks on a Ray cluster (``--launcher ray``): what differs from the other launchers.

The engine set is a placement group with one actor per rank (``launcher``); the
flags are Ray's own (``--address``, ``--gpus-per-rank`` / ``--cpu``, ``--pack`` /
``--spread``); ``--hosts``, ``--gpus`` and the Slurm flags are refused; a controller on
loopback is allowed (a Ray cluster of this machine; the launcher refuses it when a Ray
node is elsewhere); a rank whose actor or engine ended is dead with Ray's reason
(``ended_ranks``). A scale goes as for the other remote launchers (``RemoteEngines``):
a grow is one more engine set, a placement group of the added ranks' bundles with the
cluster's strategy; a shrink ends the newest ranks first, each through its actor
(``launcher.leave``), and an engine set left with no rank is stopped (its placement
group removed). ``%dist_sync`` is refused, naming what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ... import envvars
from ..engines.base import Start
from ..engines.remote import RemoteEngines
from ..hosts import HostsError

if TYPE_CHECKING:
    from ..facts import RankInfo
    from ..spec import ClusterSpec

PLACEMENTS = ("", "pack", "spread")
# The flags only --launcher ray takes, by their argparse dest (refused elsewhere).
RAY_FLAGS = (
    ("--address", "address"),
    ("--gpus-per-rank", "gpus_per_rank"),
    ("--pack/--spread", "placement"),
)


class RayEngines(RemoteEngines):
    name: ClassVar[str] = "ray"
    takes_ray_fields: ClassVar[bool] = True

    def check_own(self, spec: ClusterSpec) -> None:
        if spec.gpus:
            raise HostsError(
                "--gpus names GPUs of this machine; with --launcher ray use --gpus-per-rank K"
            )
        if spec.gpus_per_node:
            raise HostsError("--gpus-per-node is not for --launcher ray: use --gpus-per-rank K")
        if spec.ray_placement not in PLACEMENTS:
            raise HostsError(f"placement must be pack or spread (got {spec.ray_placement!r})")
        if spec.gpus_per_rank < 0 or not spec.cpus_per_rank > 0:
            raise HostsError("--gpus-per-rank must be 0 or more, and CPUs per rank above 0")

    def engine_launcher(self, spec: ClusterSpec) -> tuple[type, dict[str, dict[str, Any]]]:
        from .launcher import RayEngineSetLauncher

        traits: dict[str, Any] = {
            "address": spec.ray_address,
            "cpus_per_rank": float(spec.cpus_per_rank),
            "gpus_per_rank": int(spec.gpus_per_rank),
            "placement": spec.ray_placement,
            "place_timeout": float(spec.timeout),
            "start_timeout": float(spec.start_timeout),
            "controller_ip": spec.ip,
        }
        return self.configured(RayEngineSetLauncher, spec, traits)

    def engine_env(self, spec: ClusterSpec, env: dict[str, str]) -> dict[str, str]:
        out = super().engine_env(spec, env)
        if spec.gpus_per_rank:
            out.pop(envvars.CPU, None)  # the actor names its GPUs (actor.py)
        return out

    def engine_args(self, spec: ClusterSpec) -> list[str]:
        # The actor sees its engine's exit at once (its wait call): no nanny process.
        return ["--IPEngine.enable_nanny=False"]

    def ended_ranks(
        self, ranks: list[RankInfo], engine_sets: list[tuple[str, Any]]
    ) -> dict[int, str]:
        """Ranks whose actor or engine ended, with Ray's reason: {rank: how}."""
        ended: dict[tuple[str, int], str] = {}
        for _, engine_set in engine_sets:
            for data in dict(getattr(engine_set, "stop_data", {}).get("engines", {})).values():
                if data.get("reason") and data.get("reason") != "stopped":
                    ended[(str(data.get("host")), int(data.get("pid") or 0))] = data["reason"]
        return {r.rank: ended[(r.host, r.pid)] for r in ranks if (r.host, r.pid) in ended}

    def threads(self, spec: ClusterSpec) -> int | None:
        """A rank's threads after a scale: ``--threads``, else its bundle's CPUs (as the
        actor gave its engine at start), not the node's cores over its ranks."""
        return spec.threads or max(1, int(spec.cpus_per_rank))

    def scale_starts(
        self,
        spec: ClusterSpec,
        added: int,
        target: dict[str, int],
        have: dict[str, int],
        base_env: dict[str, str],
    ) -> list[Start]:
        # One more engine set: its own placement group of the added ranks' bundles.
        return [(added, dict(base_env), {})]

    def grow_where(self, grow: dict[str, int]) -> str:
        return "in a new Ray placement group"

    def engine_stopper(self, engine_set: Any, host: str, pid: int) -> Any:
        """A leaving rank ends through its actor (its engine, then the actor)."""
        return _Leave(engine_set, pid) if engine_set is not None else None

    def sync_hosts(self, spec: ClusterSpec) -> list[str]:
        from ..sync import SyncError

        raise SyncError(
            "%dist_sync copies over ssh, which Ray nodes may not take: keep the code on a "
            "file system the Ray nodes share (or install it on every node)"
        )

    def spec_from_flags(self, args: Any) -> dict[str, Any]:
        """The ClusterSpec fields of ``%dist_cluster start --launcher ray`` (HostsError
        naming the fix); the caller builds the spec (spec.py imports the strategies)."""
        from ..hosts import listen_ip

        if args.gpus is not None:
            raise HostsError(
                "--gpus names GPUs of this machine; with --launcher ray use --gpus-per-rank K"
            )
        if args.hosts or args.nodes:
            flag = "--hosts" if args.hosts else "--nodes"
            raise HostsError(f"{flag} is not for --launcher ray: Ray places the ranks (-n N)")
        gpus = int(getattr(args, "gpus_per_rank", None) or 0)
        if args.cpu and gpus:
            raise HostsError("give --cpu or --gpus-per-rank K, not both")
        return dict(
            n=args.n or 2,
            backend=args.backend,
            timeout=args.timeout,
            threads=args.threads,
            ip=listen_ip(args.ip, args.interface),
            launcher=self.name,
            auto_restart=args.auto_restart,
            ray_address=getattr(args, "address", None) or "",
            gpus_per_rank=gpus,
            ray_placement=getattr(args, "placement", None) or "",
        )


class _Leave:
    """What ``RemoteEngines`` signals to end one engine: here, its rank's actor."""

    def __init__(self, engine_set: Any, pid: int) -> None:
        self.engine_set, self.pid = engine_set, pid

    def signal(self, sig: int) -> None:
        self.engine_set.leave(self.pid)
