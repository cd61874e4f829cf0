"""The kernel's current cluster, shared by the magic classes of one shell."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError

from ..cluster import ClusterState
from ..cluster.kind import Cluster


class Session:
    """Holds the cluster the magics act on (one per IPython shell). Stop, interrupt and
    the panel's requests are the cluster's owner's (cluster/owner.py), not this one's."""

    _by_shell: dict[int, Session] = {}

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        # The training run this kernel started last (blocking or --background).
        self.run: Any = None

    def active_run(self, cluster: Cluster) -> Any:
        return cluster.owner.active_run()

    def interrupt(self, cluster: Cluster) -> str:
        return cluster.owner.interrupt()

    def stop(self, cluster: Cluster, reason: str = "%dist_cluster stop") -> str:
        return cluster.owner.stop(reason)

    def stopping(self, cluster: Cluster) -> bool:
        return cluster.owner.stopping()

    def wait_for_stop(self, cluster: Cluster, timeout: float) -> None:
        cluster.owner.wait_for_stop(timeout)

    @classmethod
    def for_shell(cls, shell: Any) -> Session:
        key = id(shell)
        if key not in cls._by_shell:
            cls._by_shell[key] = cls()
        return cls._by_shell[key]

    def after_failure(self) -> None:
        """With --auto-restart, replace the engines of ranks that died during a cell."""
        cluster = self.cluster
        if cluster is None or not cluster.spec.auto_restart:
            return
        dead = cluster.dead_ranks()
        if dead:
            print(f"auto-restart: replacing rank(s) {', '.join(map(str, sorted(dead)))}")
            cluster.restart_sync()

    def ready_cluster(self) -> Cluster:
        cluster = self.cluster
        if cluster is None or cluster.state in (ClusterState.STOPPED, ClusterState.NEW):
            raise UsageError("no cluster is running: start one with %dist_cluster start")
        if self.stopping(cluster):
            raise UsageError(
                f"cluster {cluster.id} is being stopped (Stop in the panel): start a new one"
                " with %dist_cluster start"
            )
        if cluster.state != ClusterState.READY:
            raise UsageError(
                f"the cluster is {cluster.state.value}: run %dist_cluster restart, "
                "or %dist_cluster stop then start"
            )
        return cluster
