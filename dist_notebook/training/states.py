"""The one door through which a run's state and its ranks' states change.

``RunStates.move`` holds one lock, checks the run's move and each rank's against
``protocol.TRANSITIONS`` (``IllegalMove`` otherwise: a bug of ours) and writes the run
store in the same step: a stop from the panel's thread and the run's own end cannot
interleave into a state that memory and store do not share. A kernel following a run
that another process runs (a detached cluster's keeper, ``detached/keptrun.py``) only
mirrors what the store says: ``mirror``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..protocol import RunRankState, RunState, check_move
from ..store.recorder import record

if TYPE_CHECKING:
    from ..store import StoreWriter


class RunStates:
    """A run's state and its ranks' states, behind one lock."""

    def __init__(
        self, run_id: str, ranks: Iterable[int], writer: StoreWriter | None = None
    ) -> None:
        self.id = run_id
        self._writer = writer
        self._lock = threading.Lock()
        self._state = RunState.PENDING
        self._ranks = {r: RunRankState.PENDING.value for r in ranks}

    @property
    def state(self) -> RunState:
        return self._state

    @property
    def ranks(self) -> dict[int, str]:
        """{rank: its state in this run} (a copy)."""
        return dict(self._ranks)

    def move(
        self,
        state: RunState,
        ranks: Mapping[int, str],
        error: str | None = None,
        detail: Mapping[int, str] | None = None,
    ) -> None:
        """Move the run to *state* and the given ranks to theirs (*detail*: a rank's
        error), and record it in the store. A move the protocol does not allow, of the
        run or of any rank, raises ``IllegalMove`` and changes nothing."""
        with self._lock:
            check_move(self._state, state, RunState, f"run {self.id}")
            for rank, rank_state in ranks.items():
                old = self._ranks.get(rank, RunRankState.PENDING.value)
                check_move(old, rank_state, RunRankState, f"rank {rank} of run {self.id}")
            self._state = state
            self._ranks.update({r: RunRankState(s).value for r, s in ranks.items()})
            # The ranks first: a reader that finds the run ended finds its ranks' ends.
            for rank, rank_state in ranks.items():
                record(
                    self._writer,
                    "set_run_rank",
                    self.id,
                    rank,
                    RunRankState(rank_state).value,
                    (detail or {}).get(rank),
                )
            record(self._writer, "set_run_state", self.id, state.value, error)

    def mirror(self, state: RunState, ranks: Mapping[int, str]) -> bool:
        """Take the states another process recorded (it moved them along the protocol;
        between two looks it may have moved more than once); True if anything changed."""
        with self._lock:
            merged = {**self._ranks, **ranks}
            if state == self._state and merged == self._ranks:
                return False
            self._state = state
            self._ranks = merged
            return True
