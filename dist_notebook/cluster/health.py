"""Which ranks are dead or unresponsive, and whether the controller lives: the cluster's
health, read from ipyparallel's launchers and client (never from the process list).

- An engine process that exits is seen by its launcher's wait thread at once.
- An engine the controller dropped after missed heartbeats (a rank stopped with
  SIGSTOP, or hung outside Python) is seen by a watch thread of the kernel, so status
  names the unresponsive rank without waiting for a cell.
- A rank dropped while stopped that runs again (SIGCONT) is replaced by the watch
  thread itself: ipyparallel never takes a dropped engine back.
- A controller that dies is seen by its launcher: the cluster fails at once, its
  engines are ended (they cannot join another controller), and restart starts anew.

``Health`` is a collaborator of the cluster (``cluster.health``): it asks of the cluster
only what ``Watched`` declares, and keeps its own state (the exits that are no deaths,
its watch thread).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

import psutil

from .. import envvars
from ..protocol import ClusterState, EngineState
from ..store import StoreWriter
from ..store.recorder import record
from . import reap
from .hosts import lost_ranks
from .spec import ClusterSpec

if TYPE_CHECKING:
    import ipyparallel as ipp

    from .facts import RankInfo
    from .ippengines import Engines

log = logging.getLogger("dist_notebook")

UNRESPONSIVE = "unresponsive"
HEALTH_PERIOD = 0.25  # seconds between looks for engines the controller dropped


def _stopped(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_STOPPED)
    except psutil.NoSuchProcess:
        return False


def _process_state(pid: int, rank: int) -> str:
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return f"process {pid} is gone"
    if status == psutil.STATUS_STOPPED:  # its state, by the pid the cluster knows
        return (
            f"rank {rank} is stopped (SIGSTOP): send SIGCONT (kill -CONT {pid}) or "
            "%dist_cluster restart"
        )
    return f"process {pid} is {status} but its engine missed its heartbeats"


def _segv_hint(code: int, engine_set: Any) -> str:
    """Why a rank may have segfaulted, where its environment says: torch's DDP on gloo
    crashes rank 0 with TORCH_DISTRIBUTED_DEBUG=DETAIL (torch's bug, under torchrun too)."""
    env = {**os.environ, **(getattr(engine_set, "environment", None) or {})}
    if -code != signal.SIGSEGV or env.get("TORCH_DISTRIBUTED_DEBUG", "").upper() != "DETAIL":
        return ""
    return (
        " with TORCH_DISTRIBUTED_DEBUG=DETAIL set, which makes torch's DDP on gloo crash "
        "(a torch bug): unset it or set it to INFO, then %dist_cluster restart"
    )


class Watched(Protocol):
    """What health reads and does of its cluster (``DistCluster`` is one)."""

    id: str
    # The controller, its engine sets and the client (cluster/ippengines.py).
    engines: Engines

    @property
    def client(self) -> ipp.Client | None: ...

    @property
    def spec(self) -> ClusterSpec: ...

    @property
    def state(self) -> ClusterState: ...

    @property
    def ranks(self) -> list[RankInfo]: ...

    @property
    def failure(self) -> str | None:
        """Why the cluster cannot work until restarted (set by a move to failed)."""
        ...

    @property
    def tearing_down(self) -> bool:
        """The cluster is stopping its processes itself (their exits are no failure)."""
        ...

    def writer(self) -> StoreWriter | None: ...

    def move(
        self, new: ClusterState, *, failure: str | None = None, only_from: Any = None
    ) -> bool: ...

    def move_rank(self, rank: int, new: EngineState | str) -> bool: ...

    async def restart(self, everything: bool = False) -> Any: ...


class Health:
    """Health of one cluster: which ranks are dead or unresponsive, the watch thread
    that notices them, and what a controller's death does."""

    def __init__(self, cluster: Watched) -> None:
        self.cluster = cluster
        # Exit records of engines that ended on purpose (replaced, scaled away): no deaths.
        self._buried: set[tuple[str, str]] = set()
        self._watch: threading.Thread | None = None

    def bury(self, set_id: str, identifier: str) -> None:
        """The engine *identifier* of engine set *set_id* ends on purpose: its exit is
        not a dead rank."""
        self._buried.add((set_id, identifier))

    def bury_exits(self) -> None:
        """Every exit recorded so far is no death (the ranks it ended were replaced)."""
        for set_id, engine_set in self.cluster.engines.engine_sets():
            for identifier in getattr(engine_set, "stop_data", {}).get("engines", {}):
                self.bury(set_id, identifier)

    def watch(self) -> None:
        """Start the watch thread (once: a thread still watching goes on)."""
        if self._watch is None or not self._watch.is_alive():
            self._watch = threading.Thread(
                target=self._watch_health,
                name=f"dist-notebook-health-{self.cluster.id}",
                daemon=True,
            )
            self._watch.start()

    def dead_ranks(self) -> dict[int, str]:
        """Ranks whose local engine process has exited: {rank: how it ended}.

        The launcher notices an exit at once (its wait thread); engines of remote
        launchers are declared dead by ipyparallel's heartbeat instead.
        """
        cluster = self.cluster
        if not cluster.engines.started:
            return {}
        if not cluster.spec.engines.on_this_machine:
            lost = lost_ranks(cluster.ranks, set(cluster.client.ids) if cluster.client else set())
            # A launcher that hears of its engines' ends (Ray's actors) says how each ended.
            ended = getattr(cluster.spec.engines, "ended_ranks", None)
            if ended is not None:
                lost.update(ended(cluster.ranks, cluster.engines.engine_sets()))
            return lost
        dead = {}
        for set_id, engine_set in cluster.engines.engine_sets():
            offset = int(engine_set.environment.get(envvars.RANK_OFFSET, "0"))
            # The engine set moves a launcher's exit record here as soon as it exits.
            for identifier, data in dict(engine_set.stop_data.get("engines", {})).items():
                if (set_id, identifier) in self._buried:
                    continue
                code = data.get("exit_code")
                if isinstance(code, int) and code < 0:
                    how = f"signal {signal.Signals(-code).name}" + _segv_hint(code, engine_set)
                else:
                    how = f"exit code {code}"
                dead[int(identifier) + offset] = how
        dead.update(self._unresponsive(dead))
        return dead

    def _unresponsive(self, dead: dict[int, str]) -> dict[int, str]:
        """Ranks whose engine the controller dropped (missed heartbeats) though its
        process may live: stopped (SIGSTOP) or hung outside Python. Such an engine
        never comes back by itself, even after SIGCONT: the watch thread replaces it
        once its process runs again (restart does it at once)."""
        if self.cluster.client is None or self.cluster.state not in (
            ClusterState.READY,
            ClusterState.DEGRADED,
        ):
            return {}
        registered = set(self.cluster.client.ids)
        found = {}
        for info in self.cluster.ranks:
            if info.rank in dead or info.engine_id in registered:
                continue
            found[info.rank] = f"{UNRESPONSIVE}: {_process_state(info.pid, info.rank)}"
        return found

    def check(self) -> dict[int, str]:
        """Look for dead or unresponsive ranks now and record them; return them."""
        dead = self.dead_ranks()
        fresh = {
            r: how
            for r, how in dead.items()
            if self.cluster.ranks[r].state not in ("dead", UNRESPONSIVE)
        }
        if fresh:
            self.mark_dead(fresh)
        return dead

    def mark_dead(self, ranks: dict[int, str]) -> None:
        """Record dead ranks: the cluster needs a restart before the next cell."""
        for info in self.cluster.ranks:
            if info.rank in ranks:
                how = ranks[info.rank]
                state = (
                    EngineState.UNRESPONSIVE if how.startswith(UNRESPONSIVE) else EngineState.DEAD
                )
                self.cluster.move_rank(info.rank, state)
                record(
                    self.cluster.writer(),
                    "add_event",
                    "rank-died",
                    ranks[info.rank],
                    cluster_id=self.cluster.id,
                    rank=info.rank,
                )
        if ranks:
            # Only from ready, atomically: a restart or stop that moved it meanwhile wins.
            self.cluster.move(ClusterState.DEGRADED, only_from=(ClusterState.READY,))

    def _watch_health(self) -> None:
        """While the cluster runs: notice an engine the controller dropped (a stopped or
        hung rank), so status says which rank is unresponsive without waiting for a cell.
        (Exits of processes and of the controller come from the launchers' own threads.)"""
        while self.cluster.state in (
            ClusterState.READY,
            ClusterState.DEGRADED,
            ClusterState.RESTARTING,
        ):
            if self.cluster.state != ClusterState.RESTARTING:
                try:
                    self.check()
                    self._replace_resumed()
                except Exception as e:  # a client closing under us: say it, keep watching
                    log.debug("health check: %s", e)
            time.sleep(HEALTH_PERIOD)

    def resumed_ranks(self) -> list[int]:
        """Unresponsive ranks whose process runs again (SIGCONT after SIGSTOP), when no
        other rank is dead: the ranks the cluster replaces by itself."""
        if (
            self.cluster.state != ClusterState.DEGRADED
            or not self.cluster.spec.engines.on_this_machine
        ):
            return []
        bad = [r for r in self.cluster.ranks if r.state in ("dead", UNRESPONSIVE)]
        if any(r.state != UNRESPONSIVE or _stopped(r.pid) for r in bad):
            return []  # a dead rank is the user's (or --auto-restart's) to replace
        return [r.rank for r in bad]

    def _replace_resumed(self) -> None:
        """A rank dropped while stopped and since resumed: ipyparallel never takes a
        dropped engine back, so that rank would stay unusable until a restart. Replace
        it now (its process is ended; the other ranks keep their state) and say so."""
        resumed = self.resumed_ranks()
        if not resumed:
            return
        from .loop import run_sync

        names = ", ".join(str(r) for r in resumed)
        message = (
            f"rank {names} runs again (SIGCONT) but its engine was dropped while it was "
            "stopped: replacing it (its variables are lost; the other ranks keep theirs)"
        )
        log.warning("cluster %s: %s", self.cluster.id, message)
        record(
            self.cluster.writer(), "add_event", "rank-replaced", message, cluster_id=self.cluster.id
        )
        try:
            run_sync(self.cluster.restart())
        except Exception as e:  # said to the user; the cluster stays failed until restart
            log.warning(
                "cluster %s: replacing rank %s failed: %s; run %%dist_cluster restart",
                self.cluster.id,
                names,
                e,
            )
        else:
            log.warning(
                "cluster %s: rank %s replaced; the cluster is ready", self.cluster.id, names
            )

    def controller_stopped(self, stop_data: dict[str, Any]) -> None:
        """The controller's launcher saw it exit (its wait thread, within ~0.1 s).

        Outside a stop this is a failure: no cell can run, and the engines cannot join
        another controller, so they are ended now rather than left waiting.
        """
        if self.cluster.tearing_down or self.cluster.state in (
            ClusterState.STOPPING,
            ClusterState.STOPPED,
        ):
            return
        code = stop_data.get("exit_code")
        how = (
            f"signal {signal.Signals(-code).name}"
            if isinstance(code, int) and code < 0
            else (f"exit code {code}")
        )
        # Its ranks stop too, in memory and in the store (the one door: facts.py).
        self.cluster.move(
            ClusterState.FAILED,
            failure=f"the controller died ({how}): run %dist_cluster restart to start a new one",
        )
        record(
            self.cluster.writer(), "add_event", "controller-died", how, cluster_id=self.cluster.id
        )
        engines = [p for p in self.cluster.engines.local_pids() if p != stop_data.get("pid")]
        tree = reap.process_tree(engines)
        for proc in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.terminate()
        reap.reap(tree)
