"""Process groups end where no gloo worker can deadlock with the GIL.

A gloo group's destructor (``~ProcessGroupGloo``) joins its worker threads. A worker
that has just completed a collective then frees the work item, and with it the work's
tensors; when Python has dropped those tensors already (a function's locals, as its
``return`` frees them), freeing them takes the GIL. When the group's last reference is
held in C++, by a DDP model's ``Reducer``, the destructor runs inside the model's
deallocation, on the main thread, with the GIL held: it waits for the worker, the worker
waits for the GIL, and every Python thread of the engine is frozen for good (its parent
watch and its interrupt included). Seen after a torchrun-style script's ``main()``
returned (an ``all_gather`` then ``destroy_process_group()``), under CPU load, in about
one run in three: a worker descheduled between completing the collective and freeing it.

torch's Python binding of a group releases the GIL in its destructor. So the last
reference to every group a script or a cell's teardown lets go of is a Python one, kept
here (``holding_groups``, ``keep``), and dropped on a thread of its own, off the path the
kernel waits on (``release``): a worker that still has work to free gets the GIL, and a
group whose worker is blocked in a collective with a dead peer blocks only that thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_kept: list[Any] = []
_lock = threading.Lock()


def live_groups() -> list[Any]:
    """The process groups torch knows on this rank (the default one included)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return []
    from .. import privates

    return privates.live_groups()


def keep(groups: list[Any]) -> None:
    """Hold a Python reference to *groups* until the next ``release()``."""
    with _lock:
        _kept.extend(groups)


def release() -> threading.Thread:
    """Drop the groups kept so far, on a thread of their own; return that thread.

    Where a kept reference is a group's last, the group ends there, with the GIL
    released by torch's binding; the caller never waits for it.
    """
    with _lock:
        groups = list(_kept)
        _kept.clear()
    thread = threading.Thread(
        target=_drop, args=(groups,), name="dist-notebook-group-release", daemon=True
    )
    thread.start()
    return thread


def _drop(groups: list[Any]) -> None:
    groups.clear()  # the last Python reference: a destructor runs here, not on the caller


@contextlib.contextmanager
def holding_groups() -> Iterator[None]:
    """While a script runs: every group it destroys is kept (``keep``) before torch
    forgets it, so the script's objects that outlive the destroy (a DDP model freed as
    ``main()`` returns) never drop a group's last reference. ``release()`` after."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original = c10d.destroy_process_group

    def destroy_process_group(group: Any = None) -> None:
        keep(live_groups() if group is None else [group])
        original(group)

    destroy_process_group.__doc__ = original.__doc__
    dist.destroy_process_group = c10d.destroy_process_group = destroy_process_group
    try:
        yield
    finally:
        dist.destroy_process_group = c10d.destroy_process_group = original
