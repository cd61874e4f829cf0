"""Time spent in DDP's gradient communication, measured on each rank.

While a ``%%dist_train`` run is active, every ``DistributedDataParallel`` model built on
the rank gets a communication hook that wraps the default all-reduce (or the user's own
hook, if they register one) and records when each bucket's all-reduce starts and ends.
At each ``report()`` the rank sends ``comm_time``: the wall time since the previous
report during which at least one gradient all-reduce was in flight (overlapping buckets
are counted once). ``comm_time / step_time`` is the dashboard's comm share; with perfect
overlap of communication and backward compute it can be high while costing little, so
read it together with samples/s.
"""

from __future__ import annotations

import threading
import time
from typing import Any

_lock = threading.Lock()
_intervals: list[tuple[float, float]] = []
_original_init: Any = None


def _record(start: float, end: float) -> None:
    with _lock:
        _intervals.append((start, end))


def _timed(hook: Any) -> Any:
    # No annotations here: DDP checks that annotated hooks name dist.GradBucket.
    def timed_hook(state, bucket):  # type: ignore[no-untyped-def]
        start = time.time()
        future = hook(state, bucket)

        def done(fut: Any) -> Any:
            _record(start, time.time())
            return fut.value()

        return future.then(done)

    return timed_hook


def comm_metrics(now: float) -> dict[str, float]:
    """The report() step hook: union length of the intervals recorded since last call."""
    with _lock:
        spans = sorted(_intervals)
        _intervals.clear()
    if not spans:
        return {}
    total, cur_start, cur_end = 0.0, spans[0][0], spans[0][1]
    for start, end in spans[1:]:
        if start > cur_end:
            total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    total += cur_end - cur_start
    return {"comm_time": total}


def _instrument(ddp: Any) -> None:
    """Wrap the model's communication hook with timing, now or when the user sets one."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    register = ddp.register_comm_hook
    chosen: dict[str, bool] = {"done": False}

    def register_comm_hook(state: Any, hook: Any) -> None:
        chosen["done"] = True
        register(state, _timed(hook))

    def first_forward(*args: Any, **kwargs: Any) -> Any:
        # The user had until the first forward to register a hook; else use the default.
        del ddp.forward
        if not chosen["done"] and getattr(ddp, "_comm_hooks", None) in (None, []):
            chosen["done"] = True
            register(None, _timed(allreduce_hook))
        return ddp.forward(*args, **kwargs)

    ddp.register_comm_hook = register_comm_hook
    ddp.forward = first_forward


def install() -> None:
    """Instrument DDP models created from now on (until ``uninstall``)."""
    global _original_init
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .reporter import add_step_hook

    if _original_init is not None:
        return
    _original_init = DDP.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _original_init(self, *args, **kwargs)
        _instrument(self)

    DDP.__init__ = __init__  # type: ignore[method-assign]
    add_step_hook(comm_metrics)


def uninstall() -> None:
    global _original_init
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .reporter import remove_step_hook

    if _original_init is not None:
        DDP.__init__ = _original_init  # type: ignore[method-assign]
        _original_init = None
    remove_step_hook(comm_metrics)
    with _lock:
        _intervals.clear()
