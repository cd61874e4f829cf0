"""The one door through which a cluster's facts change: its state, its spec (and so its
rank count), its rank table, the ranks' states and its failure.

Every change goes through ``ClusterFacts.move`` (the cluster) or ``move_rank`` (one
rank), which hold one lock, check the move against ``protocol.TRANSITIONS`` (a move it
does not allow raises ``IllegalMove``: a bug of ours), and write the run store in the
same step, so memory and store never disagree: the health thread, a scale and a stop
may move the same cluster at once, and each sees and writes the others' moves in the
order they took the lock. Nothing else assigns these facts: they are read-only
properties here and on ``DistCluster``, and ``RankInfo`` is frozen.

A kernel attached to a detached cluster only mirrors what the keeper (the cluster's one
writer) reports: ``mirror`` takes the keeper's facts as they are and writes nothing.

Clusters that no ``DistCluster`` holds go through the same door: a batch job's recorder
(``batch/jobfacts.py``) holds a ``ClusterFacts`` of its own, and a process that finds a
cluster in the store (the Jupyter server stopping one whose kernel is gone) takes it up
with ``from_row`` at the state the store says, so a move the protocol does not allow from
there is refused as the owner's would be. Their spec is a ``RankCount``: all the facts
read of a spec is its rank count.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..protocol import ClusterState, EngineState, can_move, check_move
from ..store.recorder import record
from .errors import ClusterError

if TYPE_CHECKING:
    from ..store import StoreWriter

# Cluster states that end every rank's engine: the ranks read stopped too.
_ENDING = frozenset({ClusterState.STOPPED, ClusterState.FAILED, ClusterState.ORPHANED})


@dataclass(frozen=True)
class RankInfo:
    """One rank of a cluster, as its rank table (and the store's ``ranks``) holds it.
    Frozen: a rank's state changes only through ``ClusterFacts.move_rank``."""

    rank: int
    engine_id: int
    host: str
    pid: int
    device: str
    backend: str = ""
    state: str = EngineState.IDLE.value
    # The rank's node: its host's place in the cluster's node order (0 on one machine).
    node_rank: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The engine id of a rank that has no ipyparallel engine (a batch job's torchrun worker):
# the store holds null for it.
NO_ENGINE = -1


class Sized(Protocol):
    """What the facts read of a cluster's spec: its rank count."""

    @property
    def n(self) -> int: ...


@dataclass(frozen=True)
class RankCount:
    """The spec of a cluster known only by its rank count: a batch job's, or one taken up
    from the store (``from_row``)."""

    n: int


SpecT = TypeVar("SpecT", bound=Sized)


class Keep:
    """The default of ``move``'s *failure*: leave the failure as it is."""


KEEP = Keep()


class ClusterFacts(Generic[SpecT]):
    """State, spec, rank table and failure of one cluster, behind one lock. The spec is a
    ``ClusterSpec`` for a cluster this kernel starts, a ``RankCount`` otherwise."""

    def __init__(
        self,
        cluster_id: str,
        spec: SpecT,
        writer: Callable[[], StoreWriter | None],
        backend: str = "",
    ) -> None:
        self.id = cluster_id
        self.backend = backend
        self._writer = writer
        self._lock = threading.RLock()
        self._state = ClusterState.NEW
        self._spec = spec
        self._ranks: tuple[RankInfo, ...] = ()
        self._failure: str | None = None

    # --- what others read ----------------------------------------------------------
    @property
    def state(self) -> ClusterState:
        return self._state

    @property
    def spec(self) -> SpecT:
        return self._spec

    @property
    def ranks(self) -> list[RankInfo]:
        """A copy of the rank table, in rank order."""
        return list(self._ranks)

    @property
    def failure(self) -> str | None:
        """Why the cluster cannot work until restarted (the controller died), or None."""
        return self._failure

    # --- the door -----------------------------------------------------------------
    def engine_ids(self, ranks: list[int] | None = None) -> list[int]:
        """ipyparallel engine ids for *ranks* (all ranks by default), in rank order."""
        by_rank = {r.rank: r.engine_id for r in self.ranks}
        wanted = sorted(by_rank) if ranks is None else ranks
        missing = [r for r in wanted if r not in by_rank]
        if missing:
            raise ClusterError(
                f"unknown rank {missing[0]}: this cluster has ranks 0..{self.spec.n - 1}"
            )
        return [by_rank[r] for r in wanted]

    def rank_of(self, engine_id: int) -> int:
        """The rank engine *engine_id* holds (-1: none)."""
        return next((r.rank for r in self.ranks if r.engine_id == engine_id), -1)

    def move(
        self,
        new: ClusterState,
        *,
        spec: SpecT | None = None,
        ranks: Iterable[RankInfo] | None = None,
        failure: str | None | Keep = KEEP,
        only_from: Iterable[ClusterState] | None = None,
    ) -> bool:
        """Move the cluster to *new* (staying put is a move), with the facts that travel
        with it, and record it all in the run store in the same step.

        *only_from*: move only if the cluster is in one of these states now, else
        return False and change nothing (a thread's "if ready, then degraded", done
        atomically). Moving to stopped, failed or orphaned stops every rank too.
        """
        with self._lock:
            if only_from is not None and self._state not in set(only_from):
                return False
            check_move(self._state, new, ClusterState, f"cluster {self.id}")
            self._state = new
            if spec is not None:
                self._spec = spec
            if ranks is not None:
                self._ranks = tuple(sorted(ranks, key=lambda r: r.rank))
            if not isinstance(failure, Keep):
                self._failure = failure
            if new in _ENDING:
                self._ranks = tuple(self._stopped(r) for r in self._ranks)
            self._store(new, ranks_changed=ranks is not None)
            return True

    def update(self, *, spec: SpecT | None = None, ranks: Iterable[RankInfo] | None = None) -> None:
        """Change the spec or the rank table, in the state the cluster is in now (read
        under the lock: a move by another thread in between is never undone)."""
        with self._lock:
            self.move(self._state, spec=spec, ranks=ranks)

    def move_rank(self, rank: int, new: EngineState | str) -> bool:
        """Move one rank's state (checked against EngineState's transitions) and record
        it; False if the cluster has no such rank, or it is in that state already."""
        target = EngineState(new)
        with self._lock:
            for at, info in enumerate(self._ranks):
                if info.rank != rank:
                    continue
                if info.state == target.value:
                    return False
                check_move(info.state, target, EngineState, f"rank {rank} of cluster {self.id}")
                table = list(self._ranks)
                table[at] = dataclasses.replace(info, state=target.value)
                self._ranks = tuple(table)
                record(self._writer(), "set_rank_state", self.id, rank, target.value)
                return True
            return False

    def mirror(
        self,
        state: ClusterState,
        ranks: Iterable[RankInfo],
        failure: str | None,
        spec: SpecT | None = None,
    ) -> None:
        """Take another process's facts as they are (a detached cluster's keeper, its
        one writer, moved them along the protocol and recorded them); nothing is
        written. Between two of its reports the keeper may have moved several times,
        so the step from the last report is not checked."""
        with self._lock:
            self._state = state
            self._ranks = tuple(sorted(ranks, key=lambda r: r.rank))
            self._failure = failure
            if spec is not None:
                self._spec = spec

    def record_all(self) -> None:
        """Write the whole of it to the store again (a cluster started unrecorded)."""
        with self._lock:
            self._store(self._state, ranks_changed=True)

    # --- the store ----------------------------------------------------------------
    def _store(self, state: ClusterState, *, ranks_changed: bool) -> None:
        writer = self._writer()
        record(
            writer, "set_cluster_state", self.id, state.value, self.backend or None, self._spec.n
        )
        if ranks_changed:
            record(writer, "set_ranks", self.id, [_stored(r) for r in self._ranks])
        elif state in _ENDING:
            for r in self._ranks:
                record(writer, "set_rank_state", self.id, r.rank, EngineState.STOPPED.value)

    @staticmethod
    def _stopped(info: RankInfo) -> RankInfo:
        if info.state == EngineState.STOPPED.value or not can_move(
            info.state, EngineState.STOPPED, EngineState
        ):
            return info
        return dataclasses.replace(info, state=EngineState.STOPPED.value)


def _stored(info: RankInfo) -> dict[str, Any]:
    """*info* as the store's ``ranks`` row holds it (no engine: null)."""
    row = info.to_dict()
    if info.engine_id == NO_ENGINE:
        row["engine_id"] = None
    return row


def from_row(
    row: Mapping[str, Any], writer: Callable[[], StoreWriter | None]
) -> ClusterFacts[RankCount]:
    """The facts of a cluster as the run store holds them (*row*: what
    ``StoreReader.cluster`` returns), for a process that did not start it to move it
    through the same door: a move the protocol does not allow from the stored state
    raises ``IllegalMove``, and each move is written as the owner's would be."""
    ranks = [
        RankInfo(
            rank=int(r["rank"]),
            engine_id=NO_ENGINE if r.get("engine_id") is None else int(r["engine_id"]),
            host=r.get("host") or "",
            pid=int(r.get("pid") or 0),
            device=r.get("device") or "",
            backend=row.get("backend") or "",
            state=EngineState(r.get("state") or EngineState.IDLE.value).value,
            node_rank=int(r.get("node_rank") or 0),
        )
        for r in row.get("ranks") or ()
    ]
    facts = ClusterFacts(
        row["id"], RankCount(int(row.get("n") or len(ranks) or 1)), writer, row.get("backend") or ""
    )
    facts.mirror(ClusterState(row["state"]), ranks, None)
    return facts
