"""The time a step waits for DDP's gradient communication, read from DDP's own statistics.

DDP's reducer already times every iteration in C++ (CPU clocks, or CUDA events on a GPU)
and, on sampled iterations, stores in its logging data the span from the first bucket's
all-reduce to the end of the reduction (``backward_comm_time``) and the part of it that
overlaps the rank's own backward (``backward_compute_comm_overlap_time``: from the first
bucket's launch to the rank's last gradient). The comm time sent is the span minus that
overlap: from the end of the rank's own backward to the end of the reduction, the
communication the step waits for (what backward did not hide) including the wait for the
slowest rank. So a rank's step time minus its comm time is its own work (forward, the
whole backward, the optimizer, its data), and the rank the others wait for, whatever
makes it slow (a sleep before forward, a heavier shard whose longer backward overlaps the
first buckets' all-reduces), spends the most time outside it. Measured with the whole span
instead (the former rule), a rank with a 4 x batch was flagged in only 10 of 18 runs: its
extra backward ran inside its own span. The gradient
all-reduce itself stays DDP's built-in C++ one, whatever hook the user sets.

On CPU ranks every iteration is sampled (``SAMPLE_RATE``; a CPU sample is two clock
reads), and each ``report()`` has DDP write this iteration's timings into its logging data
(``logger.set_runtime_stats_and_log()``, what DDP itself calls at the next forward) before
reading them (together ~30-40 us a model): the comm_time a record carries is the wait of the
step that report() closes, after that step's backward. Read at the next forward instead (what
DDP's statistics alone give), each record carried the step before's: a peer's 0.3 s stall at
step 12 was in no record (1.0 ms at step 12, 6.1 ms at step 13); read here, rank 1's step-12
record holds 0.30-0.31 s and its step 13 a few ms. Measured on 2 CPU ranks: which rank
arrives first at the all-reduce changes from step to step by +-5-10 ms, so one sampled step
in ten, smoothed and read twice a second (a former rule) left 1-3 distinct values in a
20-record window. On a GPU each timing read waits for the step's CUDA events (a sync): DDP's
own rate (one in 100) is kept there, nothing is read at report() but what DDP itself logged,
at most every ``REFRESH_SECONDS``, smoothed, so a run syncs exactly as often as under
torchrun; the straggler rule's per-step pairs then share one smoothed estimate of the ranks'
skew, a step late (not measured on a GPU here).

Every ``DistributedDataParallel`` of the rank is watched wherever it was built: the engine
patches DDP's ``__init__`` and ``__setstate__`` (a model unpickled or deep-copied) when it
boots (``watch_new_models``), so a model built in a ``%%dist`` cell before the run, or
restored from a checkpoint, is known; where the engine did not boot through
``dist_notebook.boot.engine`` (an engine of the user's own), the first run's ``install()``
patches them and finds the models built before by one scan of the garbage collector's
objects (~50 ms with torch loaded, once per process). Only the models that train in the
run count: a watched model keeps its last step's timings in DDP's logging data for as long
as it lives, so the models of earlier cells (notebook 4 keeps a dozen, one whose every
bucket waited) added their last waits to every record, and the straggler read 100% comm
share and 0 ms outside it; a model counts in a step only if DDP ran an iteration of it since
the read before (on a GPU: if it was sampled since the run began).

Why not a Python communication hook around the all-reduce: it runs on every bucket of
every step (a Python call and a future callback on gloo's thread, holding the GIL) and
replaces DDP's C++ all-reduce by the Python default hook, for the whole life of the
model: a hook cannot be removed.

At each ``report()`` the rank sends ``comm_time``: the latest per-iteration time waited
for communication (at most the step's own time) times the DDP iterations per report (1 when the loop
reports every step).
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from typing import Any

from .. import privates

# DDP iterations between timed samples on CPU: every one (DDP's own default, kept on a
# GPU, is 100: there each sample waits for the previous step's CUDA events, a sync).
SAMPLE_RATE = 1
REFRESH_SECONDS = 0.5  # with a GPU model: how often the step hook reads DDP's logging data
_SMOOTHING = 0.5  # with a GPU model: weight of a new sample in the running average
_COUNT_AFTER = 20  # DDP iterations seen before iterations per report are counted

_lock = threading.Lock()
_models: weakref.WeakSet[Any] = weakref.WeakSet()
_on_gpu: weakref.WeakSet[Any] = weakref.WeakSet()  # the watched models on a GPU
_original_init: Any = None
_original_setstate: Any = None
_active = False  # a run is on: report() reads the watched models


class _Estimate:
    """Per-iteration communication time and iterations per report, from DDP's samples."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.per_iteration: float | None = None  # seconds
        self.per_report = 1.0  # DDP iterations per report() call
        self.next_read = 0.0
        self.reports = 0  # report() calls since iterations per report were last counted
        self.moved = 0  # DDP iterations since then
        # model -> its last sampled iteration; weak keys: a freed model's id may be reused
        self.seen: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.trained: weakref.WeakSet[Any] = weakref.WeakSet()  # sampled since the run began

    def begin(self) -> None:
        """At a run's start: note each watched model's last sample, so that only the
        models that train in this run count (an earlier cell's model keeps its last step's
        timings in DDP's logging data for as long as it lives)."""
        for model in list(_models):
            data = _logging_data(model, model not in _on_gpu)  # CPU: its last iteration's
            self.seen[model] = int(data.get("iteration", 0))

    def read(self, now: float) -> None:
        """Fold in the samples DDP took since the last read."""
        self.next_read = now + REFRESH_SECONDS
        total, fresh, moved = 0.0, False, 0
        for model in list(_models):
            on_gpu = model in _on_gpu
            data = _logging_data(model, not on_gpu)
            iteration = int(data.get("iteration", 0))
            comm_ns = data.get("backward_comm_time")
            if not comm_ns or iteration <= 0:
                continue
            last = self.seen.get(model)
            if last != iteration:
                fresh = True
                if last is not None:
                    moved = max(moved, iteration - last)
                self.seen[model] = iteration
                self.trained.add(model)
            elif not on_gpu or model not in self.trained:
                # no iteration since the last read (CPU: none in this step): no wait
                continue
            total += waited_ns(comm_ns, data.get("backward_compute_comm_overlap_time")) / 1e9
        if fresh:
            old = self.per_iteration
            if old is None or not _on_gpu:
                self.per_iteration = total  # CPU: this iteration's own span
            else:
                self.per_iteration = old + _SMOOTHING * (total - old)
        self.moved += moved
        if self.moved >= _COUNT_AFTER and self.reports:
            # Enough iterations for a fair count; a loop reporting every step gives ~1.
            self.per_report = max(1.0, self.moved / self.reports)
            self.moved = self.reports = 0


_estimate = _Estimate()


def waited_ns(span_ns: int, overlap_ns: int | None) -> int:
    """The part of a comm span after the rank's own backward ended (its whole span where
    DDP gives no overlap, as a single bucket launched by the last gradient)."""
    return max(0, span_ns - max(0, overlap_ns or 0))


def _logging_data(model: Any, this_step: bool) -> dict[str, Any]:
    """DDP's logging data of *model*; with *this_step* (a CPU model), first written from
    the reducer's timings of the iteration that ran last (DDP itself writes them at the
    next forward)."""
    try:
        if this_step:
            privates.log_ddp_runtime_stats(model)
        return privates.ddp_timings(model)
    except (AssertionError, AttributeError, RuntimeError):  # a model whose reducer is gone
        return {}


def comm_metrics(now: float) -> dict[str, float]:
    """The report() step hook: this report's share of DDP's communication time."""
    estimate = _estimate
    with _lock:
        estimate.reports += 1
        # CPU: every report reads this step's sample; on a GPU at most every
        # REFRESH_SECONDS, and every report until the first sample is in.
        if not _on_gpu or now >= estimate.next_read or estimate.per_iteration is None:
            estimate.read(now)
        per_iteration = estimate.per_iteration
        per_report = estimate.per_report
    if per_iteration is None:
        return {}
    # report() keeps it within the step's own time.
    return {"comm_time": per_iteration * per_report}


def _watch(ddp: Any) -> None:
    """Sample this model's runtime statistics often enough for a live comm share."""
    on_gpu = any(p.device.type != "cpu" for p in ddp.module.parameters())
    try:
        if not on_gpu:
            privates.set_ddp_logging_sample_rate(ddp, SAMPLE_RATE)
    except (AttributeError, RuntimeError):
        return  # a DDP without a C++ reducer (python reducer): nothing to read
    with _lock:
        _models.add(ddp)
        if on_gpu:
            _on_gpu.add(ddp)


def watch_new_models() -> bool:
    """Watch every DDP model built (or unpickled) from now on; True if this call began
    watching (False: already watching). Called when the engine boots."""
    global _original_init, _original_setstate
    from torch.nn.parallel import DistributedDataParallel as DDP

    with _lock:
        if _original_init is not None:
            return False
        _original_init, _original_setstate = DDP.__init__, DDP.__setstate__
    init, setstate = _original_init, _original_setstate

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _watch(self)

    def __setstate__(self: Any, state: Any) -> None:
        setstate(self, state)
        _watch(self)

    DDP.__init__ = __init__  # type: ignore[method-assign]
    DDP.__setstate__ = __setstate__  # type: ignore[method-assign]
    return True


def _watch_existing() -> None:
    """Watch the DDP models this process already holds (built before watch_new_models)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    # type() and issubclass, not isinstance: isinstance reads each object's __class__,
    # which some modules answer with a deprecation warning.
    for obj in gc.get_objects():
        if issubclass(type(obj), DDP):
            _watch(obj)


def install() -> None:
    """At a run's start: read the watched models' comm time at each report()."""
    global _active
    from .reporter import add_step_hook

    if _active:
        return
    if watch_new_models():
        _watch_existing()
    _active = True
    with _lock:
        _estimate.reset()
        _estimate.begin()
        _estimate.next_read = time.time()
    add_step_hook(comm_metrics)


def uninstall() -> None:
    """At a run's end; the models stay watched (a later run reads them too)."""
    global _active
    from .reporter import remove_step_hook

    remove_step_hook(comm_metrics)
    _active = False
    with _lock:
        _estimate.reset()


def unwatch() -> None:
    """Stop watching new models and forget the watched ones (tests)."""
    global _original_init, _original_setstate
    from torch.nn.parallel import DistributedDataParallel as DDP

    uninstall()
    if _original_init is not None:
        DDP.__init__ = _original_init  # type: ignore[method-assign]
        DDP.__setstate__ = _original_setstate  # type: ignore[method-assign]
        _original_init = _original_setstate = None
    with _lock:
        _models.clear()
        _on_gpu.clear()
