"""One training run: submit the cell to every rank, collect metrics, record the outcome.

States (``RunState``): pending -> running -> succeeded | failed | cancelled.
A run is failed when any rank raised (that rank is marked failed, the others that were
released by the failure are marked so too); cancelled when the user stopped it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..cluster import ClusterError
from ..cluster.onranks.execute import (
    OutputSink,
    RankError,
    RankOutput,
    apply_on_ranks,
    run_on_ranks,
)
from ..engine import training as engine_training
from ..export import EXPORT_EVENT, FLAGS_EVENT, LiveExports, RunInfo, flags_json, flags_of
from ..export import check as check_exports
from ..metrics import RunMetrics
from ..protocol import RunState
from ..store import StoreWriter
from ..store.recorder import record
from .collector import Collector
from .iterators import ended_by_stop, stop_iteration_hint
from .states import RunStates

if TYPE_CHECKING:
    from ..cluster.kind import Cluster

log = logging.getLogger("dist_notebook")

MAX_STEP = 2**63 - 1  # the run store's integers


@dataclass(frozen=True)
class RunSpec:
    """What a run is asked to do: its cell and its flags."""

    code: str
    name: str = ""
    steps: int | None = None
    ranks: tuple[int, ...] | None = None
    timeout: float | None = None
    checkpoint_every: int | None = None
    checkpoint_dir: str | None = None
    resume: bool = False
    tensorboard: str | None = None  # a directory: every rank's metrics as event files, live
    mlflow: bool = False  # log to MLflow (MLFLOW_TRACKING_URI, else ./mlruns)
    command: str = ""  # the flags as the user typed them (the run's tab in the panel shows them)

    def __post_init__(self) -> None:
        for flag, value in (("--steps", self.steps), ("--checkpoint-every", self.checkpoint_every)):
            # A step is a 64-bit integer in the run store (report() refuses one beyond).
            if value is not None and not 1 <= value <= MAX_STEP:
                raise ValueError(f"{flag} must be 1 to {MAX_STEP} (got {value})")
        if self.name and self.checkpoint_dir is None and (self.checkpoint_every or self.resume):
            checkpoint_folder(self.name)  # checkpoints/NAME: a name that leaves it is refused
        # ExportUnavailable (an ImportError naming the extra) before the run is recorded.
        check_exports(tensorboard=self.tensorboard, mlflow=self.mlflow)


def checkpoint_folder(name: str) -> str:
    """``checkpoints/NAME``, a run's checkpoints without --checkpoint-dir; ValueError for
    a name that is no one folder's name there (``../..``, a ``/``, a control character),
    which would put them elsewhere."""
    seps = [s for s in (os.sep, os.altsep) if s]
    if name in ("", ".", "..") or any(s in name for s in seps) or not name.isprintable():
        raise ValueError(
            f"--name {name!r} cannot name the checkpoint folder checkpoints/NAME: give a name"
            " without '/' that is not '.' or '..', or --checkpoint-dir DIR"
        )
    return os.path.join("checkpoints", name)


@dataclass
class RunResult:
    run_id: str
    name: str
    state: RunState
    started: float
    ended: float
    outputs: dict[int, RankOutput] = field(default_factory=dict)
    rank_states: dict[int, str] = field(default_factory=dict)
    error: RankError | None = None
    records: int = 0
    hint: str = ""  # for the end message: e.g. a data iterator the Stop left exhausted
    lost: str = ""  # what records were lost, of which ranks ("" when none)

    def __repr__(self) -> str:
        took = self.ended - self.started
        return (
            f"<RunResult {self.name} ({self.run_id}) {self.state.value} in {took:.1f} s, "
            f"{self.records} records>"
        )


def lost_note(lost: dict[int, int | None], unstored: int) -> str:
    """One line on the records a run lost ("" when none): per rank, from the ranks' end
    marks (``Collector.losses``), and those the store refused."""
    parts = [f"rank {r} lost {n:,} records" for r, n in sorted(lost.items()) if n]
    unknown = sorted(r for r, n in lost.items() if n is None)
    if unknown:
        ranks = ", ".join(map(str, unknown))
        parts.append(
            f"rank{'s' if len(unknown) > 1 else ''} {ranks} never confirmed the last records"
        )
    if unstored:
        parts.append(f"{unstored:,} records could not be stored")
    return "records lost: " + "; ".join(parts) if parts else ""


def _rank_end(failure: Any, first: Any) -> str:
    """A failed run's rank that raised: ``dead`` (its process died), ``released`` (its own
    error is another than the first raising rank's: a collective freed by that failure,
    as the traceback's fold says), else ``failed``."""
    own = failure.error
    if own is not None and own.ename == "RankDied":
        return "dead"
    if failure is not first and own is not None and first.error is not None:
        if own.ename != first.error.ename:
            return "released"
    return "failed"


class RunBusyError(ClusterError):
    """A run was asked for on ranks that another run of this cluster still uses."""


# {cluster id: the run in flight on it}. Two runs at once would both set the ranks'
# metrics channel: the first would get no record and the second every record twice.
_active: dict[str, TrainingRun] = {}
_active_lock = threading.Lock()


def _claim(run: TrainingRun) -> None:
    with _active_lock:
        other = _active.get(run.cluster.id)
        # A pending run that never started (its cell failed before run()) is no claim.
        busy = other is not None and (
            other.state == RunState.RUNNING
            or (other.state == RunState.PENDING and time.time() - other.started < 30)
        )
        if other is not None and busy:
            raise RunBusyError(
                f"run {other.name} ({other.id}) is still running on this cluster: wait "
                "until it ends, or stop it (its dashboard's Stop, or the side panel), "
                f"then start {run.name} again"
            )
        _active[run.cluster.id] = run
    owner = getattr(run.cluster, "owner", None)
    if owner is not None:
        owner.run = run  # a stop cancels it first, an interrupt cancels it


def _release(run: TrainingRun) -> None:
    with _active_lock:
        if _active.get(run.cluster.id) is run:
            del _active[run.cluster.id]


class TrainingRun:
    """Runs a RunSpec on a ready cluster; ``stop()`` may be called from any thread.

    One run at a time per cluster: a second one is refused (RunBusyError) while the
    first is pending or running, before anything of it is recorded."""

    def __init__(self, cluster: Cluster, spec: RunSpec, writer: StoreWriter | None = None) -> None:
        self.cluster = cluster
        self.spec = spec
        self.id = uuid.uuid4().hex[:12]
        self.name = spec.name or f"run-{time.strftime('%H%M%S')}-{self.id[:4]}"
        self.ranks = list(spec.ranks) if spec.ranks is not None else list(range(cluster.n))
        # Its state and its ranks': changed only by _set_state (training/states.py).
        self.states = RunStates(self.id, self.ranks, writer)
        self.metrics = RunMetrics(
            self.ranks, hosts={r.rank: r.host for r in getattr(cluster, "ranks", [])}
        )
        self.started = time.time()
        self._writer = writer
        self._cancelled = threading.Event()
        self._stop_why = ""  # said with the end of a cancelled run (stop(why))
        self._send_lock = threading.Lock()  # a stop and the cell's sending, one at a time
        self._cell_sent = False
        self._lost = ""  # the records lost at its end (lost_note), once known
        self._listeners: list[Callable[[], None]] = []
        self._entered = False  # run() was called: from there its end releases the claim
        _claim(self)
        try:
            record(
                self._writer,
                "add_run",
                self.id,
                name=self.name,
                cluster_id=cluster.id,
                ranks=self.ranks,
                steps=spec.steps,
                code=spec.code,
            )
            # The options, for exports after the fact (load_run(...).to_tensorboard(DIR)).
            record(self._writer, "add_event", FLAGS_EVENT, flags_json(spec), run_id=self.id)
            if spec.command:
                record(self._writer, "add_event", "command", spec.command, run_id=self.id)
        except BaseException as e:
            self.abandon(f"{type(e).__name__}: {e}")
            raise

    def abandon(self, why: str) -> None:
        """A run whose set-up failed before run() (here, or in the cell's magic: its live
        view, the history) ends failed and gives the cluster back, so the next run, push or
        pull is not refused for a run that never began. Nothing once run() was called."""
        if self._entered:
            return
        try:
            if self.state == RunState.PENDING:
                self._set_state(RunState.FAILED, {r: "failed" for r in self.ranks}, error=why)
        finally:
            _release(self)

    def on_state(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def stop(self, why: str = "") -> None:
        """Cancel the run: interrupt every rank once its cell was sent (the cell then fails
        with KeyboardInterrupt); before that the cell is never sent. *why*: what else the
        stop does, said with the run's end (a cluster's stop: "... stopped cluster ID").

        No signal goes while the run is being set up: a SIGINT that lands in an engine's
        handling of the set-up call (outside any user code) can keep the engine from ever
        replying, which left such a run pending for good under load."""
        with self._send_lock:
            self._stop_why = self._stop_why or why
            self._cancelled.set()
            sent = self._cell_sent
        if sent:
            self.cluster.interrupt(self.ranks)

    def run(self, sink: OutputSink | None = None) -> RunResult:
        """Run the cell on every rank; *sink* receives their output as it comes."""
        self._entered = True
        try:
            return self._run(sink)
        finally:
            _release(self)

    def _run(self, sink: OutputSink | None) -> RunResult:
        key = os.urandom(32)
        exports = self._exports()
        collector = Collector(
            self.id, key, self.metrics, self._writer, ip=self.cluster.spec.ip, sinks=exports.sinks
        )
        error: RankError | None = None
        outputs: list[RankOutput] = []
        interrupted = False
        try:
            apply_on_ranks(
                self.cluster,
                engine_training.begin_run,
                collector.endpoint,
                key,
                self.id,
                self._checkpoints(),
                ranks=self.ranks,
            )
            self._set_state(RunState.RUNNING, {r: "running" for r in self.ranks})
            try:
                with self._send_lock:
                    if self._cancelled.is_set():  # stopped before its cell was sent
                        raise KeyboardInterrupt
                    self._cell_sent = True  # from here a stop interrupts the ranks
                outputs = run_on_ranks(
                    self.cluster,
                    self.spec.code,
                    self.ranks,
                    sink=sink,
                    timeout=self.spec.timeout,
                )
            except RankError as e:
                error = e
            except KeyboardInterrupt:
                interrupted = True
            except TimeoutError:
                # --timeout: every rank was interrupted; the run counts as cancelled.
                interrupted = True
        except BaseException as e:
            self._finish_channel(collector)
            if not (self._cancelled.is_set() and isinstance(e, (RankError, KeyboardInterrupt))):
                # Whatever ended it (the cluster stopped under it, a lost engine, a bug), its
                # end is recorded: never a run left pending or running for good.
                why = f"{type(e).__name__}: {e}"
                state = RunState.CANCELLED if self._cancelled.is_set() else RunState.FAILED
                self._set_state(state, {r: state.value for r in self.ranks}, error=why)
                exports.close(state.value, why)
                raise
            # Stopped before its cell began (the interrupt met begin_run): cancelled, as a
            # stop during the cell is, never an error in a thread with the run left pending.
            interrupted = True
        else:
            self._finish_channel(collector)
        result = self._conclude(outputs, error, interrupted, collector)
        # After the collector closed: every record was handed to the exporters.
        exports.close(result.state.value, None if result.error is None else str(result.error))
        return result

    def _exports(self) -> LiveExports:
        """The exporters the spec asks for (--tensorboard, --mlflow), fed by the collector."""
        info = RunInfo(
            run_id=self.id,
            name=self.name,
            code=self.spec.code,
            flags=flags_of(self.spec),
            ranks=tuple(self.ranks),
            world_size=self.cluster.n,
            backend=getattr(self.cluster, "backend", None),
            cluster_id=self.cluster.id,
            started=self.started,
        )
        return LiveExports(
            info, self.spec.tensorboard, self.spec.mlflow, on_location=self._exported
        )

    def _exported(self, location: dict[str, Any]) -> None:
        # Where the run went (the panel links to it); called from the exporter's thread.
        record(self._writer, "add_event", EXPORT_EVENT, json.dumps(location), run_id=self.id)

    def _checkpoints(self) -> dict[str, Any]:
        spec = self.spec
        directory = spec.checkpoint_dir
        if directory is None and (spec.checkpoint_every or spec.resume):
            directory = checkpoint_folder(self.name)
        return {
            "every": spec.checkpoint_every,
            "directory": os.path.abspath(directory) if directory else None,
            "resume": spec.resume,
        }

    def _finish_channel(self, collector: Collector) -> None:
        # A dead rank cannot confirm its last records: close the survivors' channels.
        alive: list[int] = []
        try:
            dead = self.cluster.dead_ranks()
            alive = [r for r in self.ranks if r not in dead]
            if alive:
                apply_on_ranks(
                    self.cluster, engine_training.end_run, ranks=alive, timeout=30, degraded_ok=True
                )
        except Exception as e:  # a cluster stopped under the run: its end is still recorded
            log.warning("closing the metrics channel: %s", e)
        collector.wait_for_ends(set(alive))
        collector.close()
        self._lost = lost_note(collector.losses(alive), collector.unstored)
        if self._lost:
            log.warning("run %s: %s", self.name, self._lost)

    def _conclude(
        self,
        outputs: list[RankOutput],
        error: RankError | None,
        interrupted: bool,
        collector: Collector,
    ) -> RunResult:
        cancelled = (
            self._cancelled.is_set()
            or interrupted
            or (error is not None and error.ename == "KeyboardInterrupt")
        )
        if cancelled:
            state, ranks = RunState.CANCELLED, {r: "cancelled" for r in self.ranks}
        elif error is not None:
            state = RunState.FAILED
            failed = {f.rank: _rank_end(f, error.failures[0]) for f in error.failures}
            ranks = {r: failed.get(r, "done") for r in self.ranks}
        else:
            state, ranks = RunState.SUCCEEDED, {r: "done" for r in self.ranks}
        stop_iteration_hint(None if cancelled else error)
        hint = ended_by_stop(self.cluster, self.ranks, error) if cancelled else ""
        if cancelled and self._stop_why:
            hint = "\n".join(x for x in (f"run {self.name} cancelled: {self._stop_why}", hint) if x)
        message = None if error is None or cancelled else str(error)
        lost = self._lost
        # A run that lost records says so in its record, whatever its state.
        note = "; ".join(x for x in (message, lost) if x) or None
        self._set_state(state, ranks, error=note, failures=error)
        return RunResult(
            run_id=self.id,
            name=self.name,
            state=state,
            started=self.started,
            ended=time.time(),
            outputs={o.rank: o for o in outputs},
            rank_states=ranks,
            error=None if cancelled else error,
            records=collector.received,
            hint=hint,
            lost=lost,
        )

    @property
    def state(self) -> RunState:
        return self.states.state

    @property
    def rank_states(self) -> dict[int, str]:
        return self.states.ranks

    def _set_state(
        self,
        state: RunState,
        ranks: dict[int, str],
        error: str | None = None,
        failures: RankError | None = None,
    ) -> None:
        detail = (
            {
                f.rank: f"{f.error.ename}: {f.error.evalue}"
                for f in failures.failures
                if f.error is not None
            }
            if failures
            else {}
        )
        self.states.move(state, ranks, error, detail)
        for listener in self._listeners:
            listener()
