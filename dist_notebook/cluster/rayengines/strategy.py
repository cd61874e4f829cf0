"""Ranks on a Ray cluster (``--launcher ray``): what differs from the other launchers.

The engine set is a placement group with one actor per rank (``launcher``); the
flags are Ray's own (``--address``, ``--gpus-per-rank`` / ``--cpu``, ``--pack`` /
``--spread``); ``--hosts``, ``--gpus`` and the Slurm flags are refused; a controller on
loopback is allowed (a Ray cluster of this machine; the launcher refuses it when a Ray
node is elsewhere); a rank whose actor or engine ended is dead with Ray's reason
(``ended_ranks``). Scale and ``%dist_sync`` are refused, each naming what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ... import envvars
from ..engines.base import EnginesStrategy, Resized, ScalePlan
from ..errors import ScaleError
from ..hosts import HostsError

if TYPE_CHECKING:
    from ..facts import RankInfo
    from ..scale import Scalable

PLACEMENTS = ("", "pack", "spread")
# The flags only --launcher ray takes, by their argparse dest (refused elsewhere).
RAY_FLAGS = (
    ("--address", "address"),
    ("--gpus-per-rank", "gpus_per_rank"),
    ("--pack/--spread", "placement"),
)
NO_SCALE = (
    "scale is not available with --launcher ray yet: %dist_cluster stop, then "
    "%dist_cluster start --launcher ray -n N"
)


class RayEngines(EnginesStrategy):
    name: ClassVar[str] = "ray"

    def check_own(self, spec: Any) -> None:
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

    def engine_launcher(self, spec: Any) -> tuple[type, dict[str, dict[str, Any]]]:
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

    def engine_env(self, spec: Any, env: dict[str, str]) -> dict[str, str]:
        out = super().engine_env(spec, env)
        if spec.gpus_per_rank:
            out.pop(envvars.CPU, None)  # the actor names its GPUs (actor.py)
        return out

    def engine_args(self, spec: Any) -> list[str]:
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

    def scale_refusal(self, spec: Any, old: int, n: int, hosts: str | None) -> str | None:
        return NO_SCALE

    async def resize(self, cluster: Scalable, plan: ScalePlan) -> Resized:
        raise ScaleError(NO_SCALE)

    def sync_hosts(self, spec: Any) -> list[str]:
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
