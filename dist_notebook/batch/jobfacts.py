"""A batch job's cluster and run in the run store, moved through the doors a notebook's
cluster and run go through.

Rank 0 of an exported job (``record.py``) records the job as a cluster (``batch-...``)
and its training cell as a run. It holds the cluster's ``ClusterFacts`` (its spec: the
rank count) and the run's ``RunStates``: each move is checked against
``protocol.TRANSITIONS`` (a move they do not allow raises ``IllegalMove`` and changes
nothing) and written to the store in the same step. Nothing here writes a state itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..cluster.facts import NO_ENGINE, ClusterFacts, RankCount, RankInfo
from ..protocol import ClusterState, EngineState, RunRankState, RunState
from ..store.recorder import record
from ..training.states import RunStates

if TYPE_CHECKING:
    from ..store import StoreWriter


class JobFacts:
    """The job's cluster and run, as rank 0 records them (*writer* None: unrecorded)."""

    def __init__(
        self,
        writer: StoreWriter | None,
        cluster_id: str,
        run_id: str,
        world_size: int,
        backend: str,
    ) -> None:
        self.writer = writer
        self.cluster = ClusterFacts(cluster_id, RankCount(world_size), lambda: writer, backend)
        self.run = RunStates(run_id, range(world_size), writer)

    def started(self, infos: Sequence[Mapping[str, Any]], kernel_pid: int) -> None:
        """The job's ranks are up (*infos*: each rank's host, pid, device, node and
        state): its cluster's row, starting with the rank table, then ready.
        *kernel_pid*: the process the panel's Stop reaches (0: none)."""
        cluster = self.cluster
        record(
            self.writer,
            "add_cluster",
            cluster.id,
            n=cluster.spec.n,
            backend=cluster.backend,
            kernel_pid=kernel_pid,
            profile_dir="",
            ipp_cluster_id="",
        )
        ranks = [
            RankInfo(
                rank=int(i["rank"]),
                engine_id=NO_ENGINE,  # a torchrun worker, no ipyparallel engine
                host=str(i["host"]),
                pid=int(i["pid"]),
                device=str(i["device"]),
                backend=cluster.backend,
                state=EngineState(i.get("state", EngineState.BUSY.value)).value,
                node_rank=int(i.get("node_rank", 0)),
            )
            for i in infos
        ]
        cluster.move(ClusterState.STARTING, ranks=ranks)
        cluster.move(ClusterState.READY)

    def running(self) -> None:
        """The training cell began on every rank."""
        self.run.move(RunState.RUNNING, dict.fromkeys(self.run.ranks, RunRankState.RUNNING.value))

    def ended(
        self, state: str, error: str | None, ranks: Mapping[int, tuple[str, str | None]]
    ) -> None:
        """The run's end (*state*, *error*) and each rank's (its state and error)."""
        self.run.move(
            RunState(state),
            {r: s for r, (s, _) in ranks.items()},
            error,
            detail={r: e for r, (_, e) in ranks.items() if e is not None},
        )

    def stopped(self) -> None:
        """The job's processes end: the cluster stopping, then stopped (its ranks too)."""
        self.cluster.move(ClusterState.STOPPING)
        self.cluster.move(ClusterState.STOPPED)
