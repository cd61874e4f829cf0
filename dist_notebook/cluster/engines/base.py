"""What every engines strategy answers: how engines of one launcher start, stop and scale.

A cluster composes one ``EnginesStrategy`` (``engines.strategy_for(spec.launcher)``)
and asks it whatever differs by launcher; no other module branches on the launcher's
name. The four strategies sit beside this file, one per launcher: ``local.py`` (ranks
are processes of this machine), ``ssh.py``, ``mpi.py`` and ``slurm.py``; what the three
remote ones share (their scale) is in ``remote.py``.

A strategy acts on a cluster only through the interface scale declares
(``cluster.scale.Scalable``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..hosts import HostsError, remote_engine_env

if TYPE_CHECKING:
    from ..errors import GrowError
    from ..scale import Scalable
    from ..spec import ClusterSpec

# (ranks to start, their environment, traits of their engine set) of one engine set.
Start = tuple[int, dict[str, str], dict[str, Any]]

SLURM_ONLY = (
    ("--nodes", "nodes"),
    ("--partition", "partition"),
    ("--time", "time_limit"),
    ("--account", "account"),
)


@dataclass
class ScalePlan:
    """What a scale changes: *n* ranks after it; for remote engines each engine's
    origin (``rankenv.origin``, by engine id) and, where the user lays out hosts, every
    host's rank count after it (*target*; empty otherwise)."""

    n: int
    origins: dict[int, dict[str, Any]] = field(default_factory=dict)
    target: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchDefaults:
    """What an exported batch job takes from the notebook's cluster where no flag says:
    its node count (None: one, or the flag's), GPUs per node and the scheduler's own
    settings (empty outside Slurm)."""

    nodes: int | None = None
    gpus_per_node: int = 0
    partition: str = ""
    time_limit: str = ""
    account: str = ""


@dataclass
class Resized:
    """The engines after a resize, for their placement: *ids* (kept ones first), the
    hosts' order before it (*previous*) and the engines kept (*kept*; None: by rank).
    *failed*: the error of a grow that failed, the cluster going on with *kept*."""

    ids: list[int]
    previous: list[str] | None = None
    kept: set[int] | None = None
    failed: GrowError | None = None


class EnginesStrategy(ABC):
    """How one launcher's engines are started, placed, watched, scaled and reached."""

    name: ClassVar[str]
    # The ranks are processes of this machine: the kernel sees their exits, signals
    # their pids (stacks, SIGCONT), cleans what they leave in /dev/shm, and checks that
    # memory and the process limit fit them. Remote ranks get none of that.
    on_this_machine: ClassVar[bool] = False
    # The user lays out the ranks on hosts (--hosts, scale --hosts).
    takes_hosts: ClassVar[bool] = False
    # The spec's Ray fields (ray_address, gpus_per_rank, ...): --launcher ray's only.
    takes_ray_fields: ClassVar[bool] = False

    # --- spec ----------------------------------------------------------------------
    def validate(self, spec: ClusterSpec) -> None:
        """Refuse options this launcher does not take (HostsError, naming the fix)."""
        if spec.hosts and not self.takes_hosts:
            raise HostsError(
                f"--hosts is for --launcher ssh or mpi, not {self.name}; "
                "Slurm picks the hosts: use --nodes N"
            )
        self.check_own(spec)
        given = [flag for flag, field in SLURM_ONLY if getattr(spec, field)]
        if given:
            raise HostsError(f"{given[0]} is a Slurm option: add --launcher slurm")

    def check_own(self, spec: ClusterSpec) -> None:
        """This launcher's own checks of *spec* (HostsError); none by default."""
        return None

    def ranks_per_host(self, spec: ClusterSpec) -> int:
        """Ranks the kernel counts on each host (threads, LOCAL_WORLD_SIZE); remote
        hosts count their own at boot (``engine.rankenv``)."""
        return 1

    def threads(self, spec: ClusterSpec) -> int | None:
        """Each rank's thread count after a scale (None: each host decides)."""
        return spec.threads  # type: ignore[no-any-return]

    # --- start ---------------------------------------------------------------------
    @abstractmethod
    def engine_launcher(self, spec: ClusterSpec) -> tuple[type, dict[str, dict[str, Any]]]:
        """ipyparallel's engine-set launcher class, and its configuration."""

    @staticmethod
    def configured(
        launcher: type, spec: ClusterSpec, traits: dict[str, Any]
    ) -> tuple[type, dict[str, dict[str, Any]]]:
        """*launcher* with *traits*, the user's ``--launcher-config`` over them."""
        return launcher, {launcher.__name__: {**traits, **spec.launcher_config}}

    def engine_env(self, spec: ClusterSpec, env: dict[str, str]) -> dict[str, str]:
        """The engines' environment, from the one a local engine gets (*env*)."""
        return remote_engine_env(spec, env)

    def engine_args(self, spec: ClusterSpec) -> list[str]:
        """Engine options of this launcher only (``launchers.engine_args`` adds these)."""
        return []

    # --- scale ---------------------------------------------------------------------
    def scale_refusal(self, spec: ClusterSpec, old: int, n: int, hosts: str | None) -> str | None:
        """Why scaling from *old* to *n* ranks cannot be done, or None."""
        if hosts and not self.takes_hosts:
            return (
                f"scale --hosts is for --launcher ssh or mpi; with --launcher {self.name} "
                "give the number of ranks only (scale N)"
            )
        return None

    async def plan_scale(self, cluster: Scalable, n: int, hosts: str | None) -> ScalePlan | None:
        """What scaling *cluster* to *n* ranks changes (*hosts*: the layout asked for),
        or None: nothing (the cluster is so already)."""
        return ScalePlan(n) if n != cluster.n else None

    @abstractmethod
    async def resize(self, cluster: Scalable, plan: ScalePlan) -> Resized:
        """Add or remove engines as *plan* says, through the launcher; the cluster's
        spec and rank table follow (the ranks are placed again afterwards)."""

    # --- what the kernel can reach -------------------------------------------------
    def sync_hosts(self, spec: ClusterSpec) -> list[str]:
        """The hosts ``%dist_sync`` copies a folder to (SyncError where it cannot)."""
        return [host for host, count in spec.hosts if count > 0]

    def batch_defaults(self, spec: ClusterSpec) -> BatchDefaults:
        """What ``%dist_export --batch`` takes from this cluster (its GPUs: the ranks'
        devices of this machine's or the hosts' cluster)."""
        return BatchDefaults(gpus_per_node=len(spec.gpus or ()))

    def stacks_refusal(self) -> str | None:
        """Why the ranks' stacks cannot be collected from this kernel, or None."""
        return (
            f"stacks needs local engines (--launcher local): the ranks of --launcher "
            f"{self.name} run on other hosts, where this kernel cannot signal them"
        )
