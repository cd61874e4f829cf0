"""The kernel's current cluster, shared by the magic classes of one shell."""

from __future__ import annotations

import time
from typing import Any

from IPython.core.error import UsageError

from ..cluster import ClusterState, DistCluster

# How long a stop waits for a cancelled run to end (its ranks interrupted, its last
# records in) before the cluster is stopped under it.
STOP_WAIT_S = 30.0


class Session:
    """Holds the cluster the magics act on (one per IPython shell)."""

    _by_shell: dict[int, Session] = {}

    def __init__(self) -> None:
        self.cluster: DistCluster | None = None
        # The training run in progress (blocking or --background), for stop and interrupt.
        self.run: Any = None
        self._watchers: dict[str, Any] = {}
        # Clusters a stop is under way for (from the panel, on the watcher's thread): from
        # the moment their run is cancelled until they are stopped, no cell may use them.
        self._stopping: set[str] = set()

    def started(self, cluster: DistCluster) -> None:
        """Follow the panel's requests for *cluster* (it just started in this kernel)."""
        from .control import ControlWatcher

        self._watchers[cluster.id] = ControlWatcher(self, cluster).start()

    def active_run(self, cluster: DistCluster) -> Any:
        run = self.run
        if run is not None and run.cluster is cluster and run.state.value in ("pending", "running"):
            return run
        return None

    def interrupt(self, cluster: DistCluster) -> str:
        """The kernel's interrupt: a training run in progress is cancelled; otherwise
        every rank gets SIGINT (the running cell raises KeyboardInterrupt)."""
        run = self.active_run(cluster)
        if run is not None:
            run.stop()
            return f"run {run.name} cancelled"
        cluster.interrupt()
        return "ranks interrupted"

    def stop(self, cluster: DistCluster, reason: str = "%dist_cluster stop") -> str:
        """Cancel the run in progress, let it end, then stop the cluster (idempotent)."""
        self._stopping.add(cluster.id)
        try:
            run = self.active_run(cluster)
            if run is not None:
                run.stop()
                deadline = time.monotonic() + STOP_WAIT_S
                while run.state.value in ("pending", "running") and time.monotonic() < deadline:
                    time.sleep(0.05)
            watcher = self._watchers.pop(cluster.id, None)
            if watcher is not None:
                watcher.close()
            cluster.stop_sync()
        finally:
            self._stopping.discard(cluster.id)
        return "stopped"

    def stopping(self, cluster: DistCluster) -> bool:
        return cluster.id in self._stopping or cluster.state == ClusterState.STOPPING

    def wait_for_stop(self, cluster: DistCluster, timeout: float) -> None:
        """Wait (up to *timeout* s) for a stop under way, e.g. Stop in the panel."""
        deadline = time.monotonic() + timeout
        while self.stopping(cluster) and time.monotonic() < deadline:
            time.sleep(0.1)

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

    def ready_cluster(self) -> DistCluster:
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
