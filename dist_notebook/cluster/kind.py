"""The one interface the magics and the owner hold a cluster by, whatever its kind.

A cluster this kernel started (``DistCluster``) and one it attached to, whose keeper
process owns it (``detached.attached.AttachedCluster``), both answer it; where they
differ they say so through it (``detached``, ``refresh``, ``keeper_run``, ``detach``),
so no caller asks which class it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import ipyparallel as ipp

    from ..protocol import ClusterState
    from ..store import StoreWriter
    from .facts import RankInfo
    from .ippengines import Engines
    from .spec import ClusterSpec


class Owner(Protocol):
    """Who stops and interrupts the cluster and holds its run, for every entry point:
    this kernel (``owner.ClusterOwner``) or, for a detached cluster, its keeper, asked
    over the link (``detached.attached.KeeperOwner``)."""

    run: Any

    def active_run(self) -> Any: ...

    def interrupt(self) -> str: ...

    def stop(self, reason: str = ...) -> str: ...

    def refuse_during_run(self, doing: str) -> None: ...

    def stopping(self) -> bool: ...

    def wait_for_stop(self, timeout: float) -> None: ...

    def watch(self) -> None: ...


class Cluster(Protocol):
    id: str
    backend: str
    progress: Callable[[str], None]
    engines: Engines
    stack_dir: str
    pair_ports: list[int]
    master_addr: str | None
    start_seconds: float | None
    ready_since: float | None
    # Its keeper process owns it (it goes on without this kernel); False: this kernel.
    detached: bool
    keeper_pid: int | None  # (its keeper's pid)
    idle_timeout: float | None  # (it stops after so long unused)

    @property
    def owner(self) -> Owner: ...

    @property
    def state(self) -> ClusterState: ...

    @property
    def spec(self) -> ClusterSpec: ...

    @property
    def ranks(self) -> list[RankInfo]: ...

    @property
    def n(self) -> int: ...

    @property
    def failure(self) -> str | None: ...

    @property
    def client(self) -> ipp.Client | None: ...

    @property
    def profile_dir(self) -> str: ...

    def writer(self) -> StoreWriter | None: ...

    def require_client(self) -> ipp.Client: ...

    def require_ready(self) -> ipp.Client: ...

    def engine_ids(self, ranks: list[int] | None = None) -> list[int]: ...

    def rank_of(self, engine_id: int) -> int: ...

    def dead_ranks(self) -> dict[int, str]: ...

    def mark_dead(self, ranks: dict[int, str]) -> None: ...

    async def init_group(self) -> None: ...

    def interrupt(self, ranks: list[int] | None = None) -> None: ...

    def refresh(self) -> Any:
        """Bring the facts up to date from whoever owns them (a keeper); else nothing."""

    def keeper_run(self, spec: Any) -> Any:
        """The keeper's run of *spec* started for this kernel to follow, or None: this
        kernel runs it itself."""

    def detach(self) -> None:
        """Let go of the cluster, which goes on without this kernel (ClusterError for a
        cluster this kernel started without --detach)."""

    def start_sync(self) -> Any: ...

    def restart_sync(self, everything: bool = False) -> Any: ...

    def scale_sync(self, n: int, hosts: str | None = None) -> float: ...

    def stop_sync(self) -> None: ...
