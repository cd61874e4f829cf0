"""The contract between processes: the metric record, the states, the derived measures.

Every process obeys this module: the ranks (``report()``), the kernel (collector, run
store writer, dashboard), the Jupyter server (REST API) and the panel's TypeScript, whose
types are generated from it (``python -m dist_notebook.protocol > extension/src/protocol.ts``;
a test fails when the committed file is out of date).

The record
    A rank's ``report(step=..., samples=..., **metrics)`` makes one ``Record``. The fields
    the system owns (rank, step, time, step_time, comm_time, samples, gpu) are kept apart from
    the user's metric names (``Record.metrics``), so any name a user picks, ``seq``,
    ``rank``, ``end``, ``time`` or ``step_time`` included, is just a metric. Non-finite
    values are kept: in memory as floats, in JSON as the strings "nan", "inf", "-inf"
    (JSON has no such numbers), drawn as gaps.

The states
    ``ClusterState``, ``EngineState`` (a rank of a cluster), ``RunState`` and
    ``RunRankState`` (a rank in one run), each with its legal transitions. A writer moves a
    state only along them, so a late or stale writer never overwrites a newer state.

The derived measures
    Computed once, here, from the last ``WINDOW`` records of each rank: step time,
    samples/s, communication time and share (comm time: what the step waits for DDP's
    gradient all-reduce after the rank's own backward ended, the wait for the slowest rank
    included: engine/commtime.py), the time outside it (step time minus comm time: the
    rank's own work, forward, backward, optimizer and data), how long the other ranks wait
    for the rank each step, and the straggler (``mark_stragglers``): the rank the others
    wait for in most steps of the window, by a share of the step.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Union, get_args, get_origin, get_type_hints

from . import verdict

PROTOCOL_VERSION = 2
WINDOW = 20  # records per rank behind every derived measure
# A straggler: in at least STRAGGLER_PERSISTENCE of the window's steps the others wait for
# it (its time outside the all-reduce minus the other ranks' median at the same step is
# positive), and by at least STRAGGLER_MIN_SHARE of its step time (the median of that
# difference), over at least STRAGGLER_MIN_SAMPLES steps every rank reported. Who arrives
# last at the all-reduce of healthy ranks is a coin toss each step, however large the
# step-to-step noise. Measured (bench/straggler.py: 2 CPU ranks, load average 8-39, with
# and without two CPU hogs, 60-step runs): at a run's end healthy ranks were waited for in
# at most 15 of 20 steps (30 runs), a rank sleeping 30 ms a step in at least 16 (30 runs);
# over every 20-step window of 18 of those runs of each, 4 healthy windows in 720 reached
# 16 (a live view's flag for a step or two) and 41 slowed ones in 720 fell below. The
# margin is one step of 20 at such loads: bench/README.md. And by at least STRAGGLER_MIN_WAIT
# seconds: on a short step a fifth is within the machine's noise. Measured (bench/straggler.py,
# 40-step runs, 2 CPU ranks of ~4-8 ms steps, 20 runs with and 20 without two CPU hogs): a
# healthy rank was still waited for in 16 of 20 steps by up to 1.1 ms at a run's end (a test
# flagged one at 0.8 ms of a 4 ms step) and by 1.6-2.3 ms in 15 of 200 20-step windows under
# hogs (5 above the floor: a live view's flag for a few steps); a rank with a 4 x batch by
# 2.3-16.9 ms in every window, a rank sleeping 30 ms by 30.5 ms or more.
# A rank whose own CPU time shows it does more work (verdict.does_more_work: >= 1.3x the
# others' median) needs to be waited for in only STRAGGLER_WORK_PERSISTENCE of the steps: its
# CPU time says why the others wait. Measured on the same runs (30 of each kind): no healthy
# rank did more work in any window (0 of 1,200), so none changes; a 4 x batch was flagged at
# a run's end in 28 of 30 runs with 0.8 alone, 29 with it, and in 539 -> 556 of 570 windows
# (a test's 8 x batch under two hogs: waited for in 15 of 20 steps by 3.7 ms of a 13.7 ms
# step, not flagged by 0.8).
STRAGGLER_PERSISTENCE = 0.8
STRAGGLER_WORK_PERSISTENCE = 0.6
STRAGGLER_MIN_SHARE = 0.2
STRAGGLER_MIN_WAIT = 0.002
STRAGGLER_MIN_SAMPLES = 10
# A record's measures of its rank's step, after its GPU sample on the wire (engine/reporter.py):
# CPU seconds of the training thread, seconds it waited for a CPU, the load average, the cores
# the rank may run on, seconds it waited for data (report(data_time=...)), peak memory (bytes).
STEP_MEASURES = ("cpu_time", "run_delay", "load", "cores", "data_time", "peak_mem")
# System fields of a record, in the order they travel on the wire.
SYSTEM_FIELDS = ("rank", "step", "time", "step_time", "comm_time", "samples", *STEP_MEASURES)
# What a rank's GPU sampler may add to a record (NVML, 1-2 Hz): utilisation (0-1),
# memory used (bytes), power (watts). Absent on CPU ranks.
GPU_FIELDS = ("util", "mem", "power")


# --- the record ------------------------------------------------------------------------
@dataclass(slots=True)
class Record:
    """One report() of one rank. ``metrics`` holds the user's names only.

    The step's measures (None where not measured; the step is the time since the rank's
    previous report()): ``cpu_time`` CPU seconds the reporting thread used
    (``time.thread_time``); ``run_delay`` seconds it was runnable but waited for a CPU
    (``/proc/thread-self/schedstat``; None where absent); ``load`` the 1-minute load
    average; ``cores`` the cores the rank may run on (its affinity); ``data_time``
    seconds it waited for data (``report(data_time=...)``); ``peak_mem`` its peak memory
    in bytes (on a GPU: allocated by torch, on CPU: the process's resident high-water
    mark, engine/reporter.py).
    """

    rank: int
    step: int | None
    time: float
    step_time: float | None = None
    comm_time: float | None = None
    samples: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    gpu: dict[str, float] | None = None
    cpu_time: float | None = None
    run_delay: float | None = None
    load: float | None = None
    cores: float | None = None
    data_time: float | None = None
    peak_mem: float | None = None

    def to_wire(self) -> list[Any]:
        """The record as a row of the wire (rank -> kernel): [step, time, step_time,
        comm_time, samples, {metrics}, gpu, *STEP_MEASURES]; ``decode_message`` reads it."""
        return [
            self.step,
            self.time,
            self.step_time,
            self.comm_time,
            self.samples,
            self.metrics,
            self.gpu,
            self.cpu_time,
            self.run_delay,
            self.load,
            self.cores,
            self.data_time,
            self.peak_mem,
        ]

    def to_json(self, seq: int | None = None) -> dict[str, Any]:
        """The record as the REST API and the live chart carry it (valid JSON)."""
        out: dict[str, Any] = {
            "rank": self.rank,
            "step": self.step,
            "time": self.time,
            "step_time": json_value(self.step_time),
            "comm_time": json_value(self.comm_time),
            "samples": json_value(self.samples),
            "metrics": {k: json_value(v) for k, v in self.metrics.items()},
            "gpu": None if self.gpu is None else {k: json_value(v) for k, v in self.gpu.items()},
            "cpu_time": json_value(self.cpu_time),
            "run_delay": json_value(self.run_delay),
            "load": json_value(self.load),
            "cores": json_value(self.cores),
            "data_time": json_value(self.data_time),
            "peak_mem": json_value(self.peak_mem),
        }
        if seq is not None:
            out["seq"] = seq
        return out


def json_value(value: float | None) -> float | str | None:
    """A float as valid JSON: non-finite values become "nan", "inf" or "-inf"."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def from_json_value(value: Any) -> float | None:
    """The inverse of json_value; anything that is not a number is None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def to_float(value: Any) -> float:
    """A metric value as a float: numbers, bools, 0-d tensors and numpy scalars.

    Raises TypeError naming the value's type for anything else (strings, lists ...).
    """
    if isinstance(value, int | float):  # bool is an int
        return float(value)
    item = getattr(value, "item", None)
    if callable(item):
        # Tensors and numpy scalars (on a GPU this waits for the value).
        inner = item()
        if isinstance(inner, int | float):
            return float(inner)
    raise TypeError(
        f"report(): a metric must be a number or a one-element tensor, not "
        f"{type(value).__name__}; report its .item() or a float"
    )


# --- the wire (rank -> kernel) ----------------------------------------------------------
# One message carries a batch: {"v", "run", "rank", "records": [[step, time, step_time,
# comm_time, samples, {metrics}, gpu, cpu_time, run_delay, load, cores, data_time,
# peak_mem], ...], "end": bool}. "end" belongs to the message, not to a record, so no
# metric name can end a rank's records. The step's measures came last, after gpu: a row
# of 7 (an older rank's) has none, and entries past the known ones are ignored. A rank
# builds its rows with Record.to_wire (engine/reporter.py); columns.py packs them.
def wire_message(run_id: str, rank: int, rows: list[list[Any]], end: bool = False) -> dict:
    return {"v": PROTOCOL_VERSION, "run": run_id, "rank": rank, "records": rows, "end": end}


class WireError(ValueError):
    """A message that does not follow the wire format."""


def decode_message(msg: Any, run_id: str) -> tuple[int, list[Record], bool]:
    """(rank, records, end) of one wire message; WireError if it is not one of this run's."""
    if not isinstance(msg, dict) or msg.get("v") != PROTOCOL_VERSION or msg.get("run") != run_id:
        raise WireError("not a message of this run")
    rank, rows = msg.get("rank"), msg.get("records")
    if type(rank) is not int or not isinstance(rows, list):
        raise WireError("a message needs an int rank and a list of records")
    records = [_decode_row(rank, row) for row in rows]
    return rank, records, bool(msg.get("end"))


def _decode_row(rank: int, row: Any) -> Record:
    if not isinstance(row, list) or len(row) < 7 or not isinstance(row[5], dict):
        raise WireError(
            "a record is [step, time, step_time, comm_time, samples, metrics, gpu, measures...]"
        )
    step, time_, step_time, comm_time, samples, metrics, gpu = row[:7]
    measures = [from_json_value(v) for v in row[7 : 7 + len(STEP_MEASURES)]]
    if gpu is not None and not isinstance(gpu, dict):
        raise WireError("a record's gpu is an object or null")
    if not (step is None or type(step) is int) or not isinstance(time_, int | float):
        raise WireError("a record's step is an int or null and its time a number")
    return Record(
        rank=rank,
        step=step,
        time=float(time_),
        step_time=from_json_value(step_time),
        comm_time=from_json_value(comm_time),
        samples=from_json_value(samples),
        metrics={str(k): x for k, v in metrics.items() if (x := from_json_value(v)) is not None},
        gpu=None
        if gpu is None
        else {k: x for k in GPU_FIELDS if (x := from_json_value(gpu.get(k))) is not None},
        **dict(zip(STEP_MEASURES, measures, strict=False)),
    )


# --- the states -------------------------------------------------------------------------
class ClusterState(str, Enum):
    """new -> starting -> ready | failed; ready -> degraded (a rank died or hangs) ->
    restarting -> ready | failed; any live state -> stopping -> stopped; ready -> failed
    (the controller died); new -> failed (a start refused before it began). A stopped or
    failed cluster may live again under its id: -> starting. ``orphaned``: the kernel
    that owned it is gone (the server found it so and stopped its processes)."""

    NEW = "new"
    STARTING = "starting"
    READY = "ready"
    DEGRADED = "degraded"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    ORPHANED = "orphaned"


class EngineState(str, Enum):
    """A rank of a cluster: idle <-> busy; -> unresponsive (no heartbeat, e.g. SIGSTOP)
    -> idle again when it answers; -> dead (its process exited); -> stopped."""

    IDLE = "idle"
    BUSY = "busy"
    UNRESPONSIVE = "unresponsive"
    DEAD = "dead"
    STOPPED = "stopped"


class RunState(str, Enum):
    """pending -> running -> succeeded | failed | cancelled; a run whose kernel is gone
    before it ended: orphaned."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ORPHANED = "orphaned"


class RunRankState(str, Enum):
    """A rank in one run: pending -> running -> done | failed (it raised) | released (freed
    after another rank failed) | dead (its process died) | cancelled."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    RELEASED = "released"
    DEAD = "dead"
    CANCELLED = "cancelled"


_C, _E, _R, _RR = ClusterState, EngineState, RunState, RunRankState
TRANSITIONS: dict[type[Enum], dict[Any, frozenset[Any]]] = {
    ClusterState: {
        _C.NEW: frozenset({_C.STARTING, _C.STOPPED, _C.FAILED}),
        _C.STARTING: frozenset({_C.READY, _C.FAILED, _C.STOPPING, _C.STOPPED, _C.ORPHANED}),
        _C.READY: frozenset(
            {_C.DEGRADED, _C.RESTARTING, _C.STOPPING, _C.STOPPED, _C.FAILED, _C.ORPHANED}
        ),
        _C.DEGRADED: frozenset(
            {_C.READY, _C.RESTARTING, _C.STOPPING, _C.STOPPED, _C.FAILED, _C.ORPHANED}
        ),
        _C.RESTARTING: frozenset({_C.READY, _C.FAILED, _C.STOPPING, _C.STOPPED, _C.ORPHANED}),
        _C.STOPPING: frozenset({_C.STOPPED, _C.FAILED}),
        _C.FAILED: frozenset({_C.STOPPING, _C.STOPPED, _C.STARTING}),
        _C.STOPPED: frozenset({_C.STARTING}),
        _C.ORPHANED: frozenset({_C.STOPPED}),
    },
    EngineState: {
        _E.IDLE: frozenset({_E.BUSY, _E.UNRESPONSIVE, _E.DEAD, _E.STOPPED}),
        _E.BUSY: frozenset({_E.IDLE, _E.UNRESPONSIVE, _E.DEAD, _E.STOPPED}),
        _E.UNRESPONSIVE: frozenset({_E.IDLE, _E.BUSY, _E.DEAD, _E.STOPPED}),
        _E.DEAD: frozenset({_E.IDLE, _E.STOPPED}),  # idle: replaced by a restart
        _E.STOPPED: frozenset(),
    },
    RunState: {
        _R.PENDING: frozenset({_R.RUNNING, _R.FAILED, _R.CANCELLED, _R.ORPHANED}),
        _R.RUNNING: frozenset({_R.SUCCEEDED, _R.FAILED, _R.CANCELLED, _R.ORPHANED}),
        _R.SUCCEEDED: frozenset(),
        _R.FAILED: frozenset(),
        _R.CANCELLED: frozenset(),
        _R.ORPHANED: frozenset(),
    },
    RunRankState: {
        _RR.PENDING: frozenset(set(_RR) - {_RR.PENDING}),
        _RR.RUNNING: frozenset(set(_RR) - {_RR.PENDING, _RR.RUNNING}),
        _RR.DONE: frozenset(),
        _RR.FAILED: frozenset(),
        _RR.RELEASED: frozenset(),
        _RR.DEAD: frozenset(),
        _RR.CANCELLED: frozenset(),
    },
}


# Named groupings of states, stated once here (and generated for TypeScript).
ENDED_CLUSTER_STATES = frozenset({_C.STOPPED, _C.FAILED, _C.ORPHANED})
"""No process of the cluster is left to act on: the panel's history, not its live list."""
LIVE_CLUSTER_STATES = frozenset(set(_C) - ENDED_CLUSTER_STATES)
"""A cluster whose processes may be running: its owner answers for it."""
ACTIVE_RUN_STATES = frozenset({_R.PENDING, _R.RUNNING})
"""A run still going."""
ENDED_RUN_STATES = frozenset(set(_R) - ACTIVE_RUN_STATES)
"""A run that has ended, one way or another (its state is final)."""
GROUPINGS: dict[str, tuple[type[Enum], frozenset[Any]]] = {
    "ENDED_CLUSTER_STATES": (ClusterState, ENDED_CLUSTER_STATES),
    "LIVE_CLUSTER_STATES": (ClusterState, LIVE_CLUSTER_STATES),
    "ACTIVE_RUN_STATES": (RunState, ACTIVE_RUN_STATES),
    "ENDED_RUN_STATES": (RunState, ENDED_RUN_STATES),
}


class IllegalMove(RuntimeError):
    """A state change that protocol.TRANSITIONS does not allow (a bug of ours)."""


def check_move(old: Enum | str, new: Enum | str, kind: type[Enum], what: str) -> None:
    """Raise IllegalMove unless *kind* may go from *old* to *new*."""
    if not can_move(old, new, kind):
        raise IllegalMove(
            f"{what}: {kind(old).value} -> {kind(new).value} is not a move of "
            f"protocol.TRANSITIONS[{kind.__name__}]"
        )


def can_move(old: Enum | str, new: Enum | str, kind: type[Enum]) -> bool:
    """Whether a state of *kind* may go from *old* to *new* (staying put is allowed)."""
    old_s, new_s = kind(old), kind(new)
    return old_s == new_s or new_s in TRANSITIONS[kind][old_s]


def predecessors(new: Enum | str, kind: type[Enum]) -> list[str]:
    """The states from which *new* may be reached (itself included): for guarded writes."""
    target = kind(new)
    return sorted(
        {target.value} | {s.value for s, nxt in TRANSITIONS[kind].items() if target in nxt}
    )


def is_final(state: Enum | str, kind: type[Enum]) -> bool:
    return not TRANSITIONS[kind][kind(state)]


# --- the derived measures ---------------------------------------------------------------
@dataclass
class RankSummary:
    """A rank's measures over its last WINDOW records (None where nothing was reported)."""

    rank: int
    host: str | None
    records: int
    last_step: int | None
    steps_done: int | None
    last_loss: float | None
    step_time: float | None
    samples_per_s: float | None
    comm_time: float | None
    comm_share: float | None
    # Median of step time minus comm time: the step's time not waiting for the gradient
    # all-reduce, the rank's own work (named compute_time before: see the module's docstring).
    outside_comm_time: float | None
    last_time: float | None
    gpu_util: float | None = None
    gpu_mem: float | None = None
    gpu_power: float | None = None
    # How long the other ranks wait for this one each step: the median over the window's
    # steps of its time outside the all-reduce minus the other ranks' median at that step
    # (negative: it waits for them); and the share of those steps in which it is positive.
    # Set by mark_stragglers (None without STRAGGLER_MIN_SAMPLES steps every rank reported).
    others_wait: float | None = None
    waited_for_share: float | None = None
    straggler: bool = False
    # The rank's own cost of a step (medians over the window; None where not measured):
    # CPU seconds of its training thread, seconds it waited for a CPU, the share of a core
    # it got while it wanted one (cpu / (cpu + run_delay)), the load average and its cores
    # (the newest), seconds waiting for data and their share of the step, and its peak
    # memory in bytes (the largest of the window).
    cpu_time: float | None = None
    run_delay: float | None = None
    cpu_share: float | None = None
    load: float | None = None
    cores: float | None = None
    data_time: float | None = None
    data_share: float | None = None
    peak_mem: float | None = None
    # Set by mark_stragglers (dist_notebook/verdict.py): its CPU time per step over the
    # other ranks' median, and whether the others wait for it because another process holds
    # its CPU (a starved rank is never the straggler).
    work_ratio: float | None = None
    starved: bool = False
    # Per step of the window: the time outside the all-reduce (for mark_stragglers; not
    # sent: to_json and the TypeScript leave it out).
    per_step: dict[int, float] = field(default_factory=dict, repr=False, compare=False)
    # Per step of the window: the comm time (for the verdict's comm-bound; not sent).
    per_step_comm: dict[int, float] = field(default_factory=dict, repr=False, compare=False)

    @property
    def compute_time(self) -> float | None:
        """The former name of ``outside_comm_time``, for code written with it."""
        return self.outside_comm_time

    def to_json(self) -> dict[str, Any]:
        return {
            f.name: json_value(v) if isinstance(v := getattr(self, f.name), float) else v
            for f in _sent(self)
        }


def _sent(obj: Any) -> list[Any]:
    """The dataclass fields that travel (all but RankSummary.per_step, per_step_comm)."""
    return [f for f in fields(obj) if f.name not in ("per_step", "per_step_comm")]


@dataclass
class HostSummary:
    """The ranks of one host (a node): their total samples/s, the longest time outside the
    all-reduce of its ranks, and whether one of them is a straggler."""

    host: str
    ranks: list[int]
    samples_per_s: float | None
    outside_comm_time: float | None
    straggler: bool = False

    @property
    def compute_time(self) -> float | None:
        """The former name of ``outside_comm_time``, for code written with it."""
        return self.outside_comm_time

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in _sent(self)}


def _median(values: Iterable[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(finite) if finite else None


def summarize_rank(
    rank: int,
    recent: Sequence[Record],
    *,
    records: int,
    first_step: int | None,
    last_step: int | None,
    last_loss: float | None,
    host: str | None = None,
) -> RankSummary:
    """The measures of one rank from its last WINDOW records (*recent*, oldest first)
    and a few facts about its whole history (how many records, first/last step, loss)."""
    step_time = _median(r.step_time for r in recent)
    comm_time = _median(r.comm_time for r in recent)
    # Per record: the step's time outside the all-reduce (comm_time is at most the step's
    # time, report() keeps it so; min() for records of older writers).
    timed = [r for r in recent if r.step_time is not None and math.isfinite(r.step_time)]
    outside = [t - min(r.comm_time or 0.0, t) for r in timed if (t := r.step_time) is not None]
    # The straggler rule pairs steps across ranks. On a GPU comm_time is one sampled step
    # in 100, smoothed (engine/commtime.py): the pairs then share one estimate of the skew.
    per_step = {r.step: v for r, v in zip(timed, outside, strict=True) if r.step is not None}
    per_step_comm = {
        r.step: min(r.comm_time, t)
        for r in timed
        if r.step is not None and r.comm_time is not None and (t := r.step_time) is not None
    }
    counted = [r for r in recent if r.samples is not None and math.isfinite(r.samples)]
    samples_per_s = None
    if len(counted) >= 2:
        span = counted[-1].time - counted[0].time
        if span > 0:
            # The first record's samples were processed before the window opened.
            samples_per_s = sum(r.samples or 0.0 for r in counted[1:]) / span
    share = None
    if comm_time is not None and step_time:
        share = min(1.0, comm_time / step_time)
    gpu = next((r.gpu for r in reversed(recent) if r.gpu), {})
    steps_done = None
    if last_step is not None:
        steps_done = last_step + 1 if first_step == 0 else last_step
    cpu_time = _median(r.cpu_time for r in recent)
    run_delay = _median(r.run_delay for r in recent)
    cpu_share = None
    if cpu_time is not None and run_delay is not None and cpu_time + run_delay > 0:
        cpu_share = cpu_time / (cpu_time + run_delay)
    data_time = _median(r.data_time for r in recent)
    peaks = [r.peak_mem for r in recent if r.peak_mem is not None and math.isfinite(r.peak_mem)]
    return RankSummary(
        rank=rank,
        host=host,
        records=records,
        last_step=last_step,
        steps_done=steps_done,
        last_loss=last_loss,
        step_time=step_time,
        samples_per_s=samples_per_s,
        comm_time=comm_time,
        comm_share=share,
        outside_comm_time=_median(outside),
        last_time=recent[-1].time if recent else None,
        gpu_util=gpu.get("util"),
        gpu_mem=gpu.get("mem"),
        gpu_power=gpu.get("power"),
        cpu_time=cpu_time,
        run_delay=run_delay,
        cpu_share=cpu_share,
        load=_newest(r.load for r in recent),
        cores=_newest(r.cores for r in recent),
        data_time=data_time,
        data_share=None if data_time is None or not step_time else min(1.0, data_time / step_time),
        peak_mem=max(peaks) if peaks else None,
        per_step=per_step,
        per_step_comm=per_step_comm,
    )


def _newest(values: Iterable[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return finite[-1] if finite else None


def mark_stragglers(summaries: list[RankSummary]) -> list[RankSummary]:
    """Set each rank's ``others_wait`` and ``waited_for_share``; flag the ranks the others
    wait for.

    In lockstep DDP every rank has the same step time: the ranks that arrive first at the
    gradient all-reduce wait in it for the last one, so the last one spends longer outside
    it. Per step of the window (the steps every rank reported), a rank's time outside the
    all-reduce minus the other ranks' median is how long they waited for it (without comm
    times, as in a loop with no collective, the difference of step times). Which healthy
    rank arrives last changes from step to step (measured on 2 CPU ranks: +-5-50 ms under
    load, and a skew of up to 40% of a step from CPU contention alone in a window), so
    the flag asks for persistence, not size alone: waited for in at least
    STRAGGLER_PERSISTENCE of the steps, by a median of at least STRAGGLER_MIN_SHARE of its
    step time and at least STRAGGLER_MIN_WAIT (a fifth of a 4 ms step is noise); in
    STRAGGLER_WORK_PERSISTENCE of the steps for a rank whose CPU time shows it does more
    work than the others (``verdict.does_more_work``).

    A rank the rule flags that is starved of a CPU (``verdict.is_starved``: the same CPU
    time per step as the others, its wait for a CPU explaining the others' wait for it) is
    marked ``starved``, not the straggler: the machine is oversubscribed, and nothing in
    the rank's code would help.
    """
    timed = [s for s in summaries if s.per_step]
    for s in summaries:
        s.others_wait = s.waited_for_share = None
        s.straggler = s.starved = False
    verdict.work_ratios(summaries)
    if len(timed) < 2:
        return summaries
    steps = sorted(set.intersection(*(set(s.per_step) for s in timed)))
    if len(steps) < STRAGGLER_MIN_SAMPLES:
        return summaries
    for s in timed:
        others = [o for o in timed if o is not s]
        waits = [s.per_step[k] - statistics.median(o.per_step[k] for o in others) for k in steps]
        s.others_wait = statistics.median(waits)
        s.waited_for_share = sum(w > 0 for w in waits) / len(waits)
        more_work = verdict.does_more_work(s, summaries)
        persistence = STRAGGLER_WORK_PERSISTENCE if more_work else STRAGGLER_PERSISTENCE
        s.straggler = bool(
            s.step_time
            and s.waited_for_share >= persistence
            and s.others_wait >= max(STRAGGLER_MIN_SHARE * s.step_time, STRAGGLER_MIN_WAIT)
        )
    for s in timed:
        if s.straggler and verdict.is_starved(s, summaries):
            s.straggler, s.starved = False, True
    return summaries


def summarize_hosts(summaries: Sequence[RankSummary]) -> list[HostSummary]:
    """Ranks grouped by host, in rank order; a host is a straggler if one of its ranks is."""
    by_host: dict[str, list[RankSummary]] = {}
    for s in summaries:
        by_host.setdefault(s.host or "?", []).append(s)
    out = []
    for host, ranks in by_host.items():
        rates = [s.samples_per_s for s in ranks if s.samples_per_s is not None]
        outside = [s.outside_comm_time for s in ranks if s.outside_comm_time is not None]
        out.append(
            HostSummary(
                host=host,
                ranks=[s.rank for s in ranks],
                samples_per_s=sum(rates) if rates else None,
                outside_comm_time=max(outside) if outside else None,
                straggler=any(s.straggler for s in ranks),
            )
        )
    return out


@dataclass
class RunSummary:
    """What every view shows of a run: per rank, per host, and the run's progress."""

    run_id: str
    state: str
    steps: int | None
    steps_done: int | None
    samples_per_s: float | None
    ranks: list[RankSummary]
    hosts: list[HostSummary]
    # Why its steps are slow, in one line (dist_notebook/verdict.py): "healthy", "rank 1 is
    # starved: ...", "rank 3 does 2.1x the work ...", "input-bound: ...", "comm-bound: ...";
    # None until there are enough steps to judge.
    verdict: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "verdict": self.verdict,
            "state": self.state,
            "steps": self.steps,
            "steps_done": self.steps_done,
            "samples_per_s": json_value(self.samples_per_s),
            "ranks": [r.to_json() for r in self.ranks],
            "hosts": [h.to_json() for h in self.hosts],
        }


def summarize_run(
    run_id: str, state: str, steps: int | None, ranks: list[RankSummary]
) -> RunSummary:
    mark_stragglers(ranks)
    done = [r.steps_done for r in ranks if r.steps_done is not None]
    rates = [r.samples_per_s for r in ranks if r.samples_per_s is not None]
    return RunSummary(
        run_id=run_id,
        state=state,
        steps=steps,
        steps_done=min(done) if done else None,
        samples_per_s=sum(rates) if rates else None,
        ranks=ranks,
        hosts=summarize_hosts(ranks),
        verdict=verdict.judge(ranks),
    )


def last_finite(values: Iterable[Mapping[str, float]], key: str) -> float | None:
    """The newest finite value of metric *key* in *values* (newest last)."""
    for metrics in reversed(list(values)):
        v = metrics.get(key)
        if v is not None and math.isfinite(v):
            return v
    return None


# --- TypeScript -------------------------------------------------------------------------
_TS_HEADER = """\
/**
 * Generated from dist_notebook/protocol.py by `python -m dist_notebook.protocol`;
 * do not edit (tests/unit/test_protocol.py fails when this file is out of date).
 */"""


def _ts_type(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, type(int | None)):
        return " | ".join(_ts_type(a) for a in args)
    if origin is list:
        return f"{_ts_type(args[0])}[]"
    if origin is dict:
        return f"{{ [name: string]: {_ts_type(args[1])} }}"
    simple = {int: "number", float: "JsonNumber", str: "string", bool: "boolean"}
    if tp is type(None):
        return "null"
    if tp in simple:
        return simple[tp]
    if isinstance(tp, type) and tp.__name__ in ("RankSummary", "HostSummary"):
        return f"I{tp.__name__}"
    raise TypeError(f"no TypeScript type for {tp!r}")


def _ts_interface(cls: type, name: str, doc: str) -> str:
    hints = get_type_hints(cls)
    lines = [f"/** {doc} */", f"export interface {name} {{"]
    for f in _sent(cls):
        lines.append(f"  {f.name}: {_ts_type(hints[f.name])};")
    return "\n".join(lines + ["}"])


def typescript() -> str:
    """The TypeScript side of this contract."""
    out = [_TS_HEADER]
    out.append(f"export const PROTOCOL_VERSION = {PROTOCOL_VERSION};")
    out.append(f"export const WINDOW = {WINDOW};")
    out.append(f"export const STRAGGLER_PERSISTENCE = {STRAGGLER_PERSISTENCE};")
    out.append(f"export const STRAGGLER_MIN_SHARE = {STRAGGLER_MIN_SHARE};")
    out.append(f"export const STRAGGLER_MIN_WAIT = {STRAGGLER_MIN_WAIT};")
    out.append(f"export const STRAGGLER_WORK_PERSISTENCE = {STRAGGLER_WORK_PERSISTENCE};")
    out.append(f"export const STRAGGLER_MIN_SAMPLES = {STRAGGLER_MIN_SAMPLES};")
    out.append(
        '/** A float in JSON: a number, or "nan" / "inf" / "-inf" (drawn as gaps). */\n'
        "export type JsonNumber = number | 'nan' | 'inf' | '-inf';"
    )
    for enum in (ClusterState, EngineState, RunState, RunRankState):
        values = " | ".join(f"'{s.value}'" for s in enum)
        out.append(f"/** {' '.join((enum.__doc__ or '').split())} */")
        out.append(f"export type {enum.__name__} = {values};")
        moves = ", ".join(
            f"{s.value}: [{', '.join(repr(n.value) for n in sorted(TRANSITIONS[enum][s]))}]"
            for s in enum
        )
        out.append(f"export const {enum.__name__.upper()}_TRANSITIONS = {{ {moves} }};")
    for name, (kind, states) in GROUPINGS.items():
        members = ", ".join(f"'{s.value}'" for s in kind if s in states)
        out.append(
            f"export const {name}: ReadonlySet<{kind.__name__}> = "
            f"new Set<{kind.__name__}>([{members}]);"
        )
    out.append(
        "/** One record as the REST API and the live chart carry it. */\n"
        "export interface IRecord {\n  seq?: number;\n  rank: number;\n  step: number | null;\n"
        "  time: number;\n  step_time: JsonNumber | null;\n  comm_time: JsonNumber | null;\n"
        "  samples: JsonNumber | null;\n  metrics: { [name: string]: JsonNumber | null };\n"
        "  gpu: { util?: JsonNumber; mem?: JsonNumber; power?: JsonNumber } | null;\n"
        + "".join(f"  {name}?: JsonNumber | null;\n" for name in STEP_MEASURES)
        + "}"
    )
    out.append(_ts_interface(RankSummary, "IRankSummary", "A rank's derived measures."))
    out.append(_ts_interface(HostSummary, "IHostSummary", "The ranks of one host."))
    out.append(_ts_interface(RunSummary, "IRunSummary", "What every view shows of a run."))
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(typescript())
