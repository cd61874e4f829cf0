"""A training run of a detached cluster: run by its keeper, followed by the kernel.

The keeper (detached/keeper.py) runs the cell on the ranks and collects and stores the
run's records, its state and its ranks' output, so the run goes on when the kernel is
gone. The kernel follows it from the run store: this object is what the live view and
the magics hold of the run (as of a TrainingRun): its records (``metrics``, the history
first, then each new record as the store has it), its state and its ranks' output.
``attach`` gives a run in progress back this way to a new kernel.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..cluster.onranks.execute import OutputSink
from ..metrics import RunMetrics
from ..protocol import ACTIVE_RUN_STATES, RunState
from ..store import StoreError, StoreReader
from ..training.run import RunResult
from ..training.states import RunStates
from .sink import END_EVENT, STREAM_EVENT

if TYPE_CHECKING:
    from .attached import AttachedCluster

FOLLOW_S = 0.25  # how often the store is read for new records, output and the state
GONE_AFTER_S = 30.0  # a run the store no longer says anything of, for this long: lost
END_WAIT_S = 3.0  # after the run's end state, for the keeper's end event (its hint)


class KeptRun:
    """The kernel's view of a run its cluster's keeper runs."""

    def __init__(self, cluster: AttachedCluster, run_id: str, name: str, ranks: list[int]) -> None:
        self.cluster = cluster
        self.id = run_id
        self.name = name
        self.ranks = list(ranks)
        # The keeper's run, as the store has it: mirrored, never moved here.
        self.states = RunStates(run_id, self.ranks)
        self.metrics = RunMetrics(
            self.ranks, hosts={r.rank: r.host for r in getattr(cluster, "ranks", [])}
        )
        self.started = time.time()
        self.steps: int | None = None  # the run's total, once the store is read
        self.error: str | None = None
        self._listeners: list[Callable[[], None]] = []
        self._records_seq = 0
        self._stream_seq = 0
        self._reader: StoreReader | None = None

    @property
    def state(self) -> RunState:
        return self.states.state

    @property
    def rank_states(self) -> dict[int, str]:
        return self.states.ranks

    def on_state(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def stop(self, why: str = "") -> None:
        """Cancel the run (the keeper interrupts its ranks; the run ends cancelled); *why*
        is the keeper's to say (its run's end), as for a TrainingRun."""
        self.cluster.stop_run(self.id)

    # --- following ---------------------------------------------------------------
    def follow_once(self, sink: OutputSink | None = None) -> bool:
        """Read what is new in the store; True once the run has ended (and all of it,
        records and output, has been read)."""
        reader = self._reader or StoreReader()
        self._reader = reader
        row = reader.run(self.id)
        if row is None:
            return False
        rows = reader.record_rows(self.id, self._records_seq)
        if rows:
            self._records_seq = rows[-1][0]
            self.metrics.add([rec for _, rec in rows])
        for event in reader.events_since(self.id, STREAM_EVENT, self._stream_seq):
            self._stream_seq = event["seq"]
            if sink is not None:
                piece = json.loads(event["message"])
                payload = piece if piece["kind"] == "display" else piece["text"]
                sink(event["rank"], piece["kind"], payload)
        self.started = row.get("started") or self.started
        self.steps = row.get("steps") or self.steps
        state = RunState(row["state"]) if row["state"] in RunState._value2member_map_ else None
        ranks = {r["rank"]: r["state"] for r in row.get("ranks", [])}
        if state is not None and self.states.mirror(state, ranks):
            self.error = row.get("error")
            for listener in self._listeners:
                listener()
        return state is not None and state not in ACTIVE_RUN_STATES

    def run(self, sink: OutputSink | None = None) -> RunResult:
        """Follow the run until it ends; its result as the store has it."""
        lost_since: float | None = None
        stopped = False
        try:
            while True:
                try:
                    if self.follow_once(sink):
                        break
                    lost_since = None
                    time.sleep(FOLLOW_S)
                except StoreError:
                    lost_since = lost_since or time.monotonic()
                    if time.monotonic() - lost_since > GONE_AFTER_S:
                        raise
                    time.sleep(FOLLOW_S)
                except KeyboardInterrupt:
                    # The kernel's interrupt cancels the run, as for a kernel's own run;
                    # it is followed to its end (its last records) all the same.
                    if stopped:
                        raise
                    stopped = True
                    self.stop()
            hint = self._end_hint()
        finally:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        row_ended = time.time()
        return RunResult(
            run_id=self.id,
            name=self.name,
            state=self.state,
            started=self.started,
            ended=row_ended,
            rank_states=dict(self.rank_states),
            records=self.metrics.count,
            hint=hint,
        )

    def _end_hint(self) -> str:
        """The keeper's line for the run's end (a Stop's "run NAME cancelled: ... stopped
        cluster ID"), written just after its end state; "" if none comes in END_WAIT_S."""
        assert self._reader is not None
        deadline = time.monotonic() + END_WAIT_S
        while True:
            try:
                events = self._reader.events_since(self.id, END_EVENT, 0)
            except StoreError:
                events = []
            if events or time.monotonic() > deadline:
                return str(events[-1]["message"] or "") if events else ""
            time.sleep(0.05)


def follow_in_background(
    run: KeptRun, sink: OutputSink | None, done: Callable[[RunResult], None]
) -> None:
    """Follow *run* on a thread (a --background run, or one found at attach)."""

    def go() -> None:
        done(run.run(sink))

    threading.Thread(target=go, name=f"dist-follow-{run.id}", daemon=True).start()
