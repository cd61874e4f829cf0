"""Move values between the kernel and the ranks: push names out, pull expressions back.

When every rank runs on the kernel's host (the local launcher), tensors and arrays travel
through one shared-memory file (``engine/shm.py``): the kernel writes them once and each
rank maps them copy-on-write, so a push costs one copy of the data whatever the number of
ranks, and a pull one copy per rank; only a small pickle goes through ipyparallel.
Otherwise (ranks on other hosts) a push goes to rank 0 through ipyparallel and on to
the others over the process group.
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING, Any

import cloudpickle
import numpy

from ...engine import shm, values
from .execute import apply_on_ranks

if TYPE_CHECKING:
    from ..kind import Cluster


def push(cluster: Cluster, mapping: dict[str, Any], ranks: list[int] | None = None) -> None:
    """Bind each name of *mapping* on every rank (cloudpickle: functions and instances
    defined in the notebook travel too; define classes with %%dist instead).

    To every rank, the value goes once to rank 0 through ipyparallel and from there
    over the process group; to some ranks, it goes to each of them directly.
    """
    if _same_host(cluster):
        dumped = shm.dump(mapping)
        if dumped.path is not None:
            try:
                apply_on_ranks(cluster, shm.bind, dumped, ranks=ranks)
            finally:
                shm.remove(dumped.path)  # every rank has mapped it (or failed)
            return
    blob = cloudpickle.dumps(mapping)
    everyone = ranks is None or sorted(ranks) == list(range(cluster.n))
    if not everyone or cluster.n == 1:
        apply_on_ranks(cluster, values.set_values, blob, ranks=ranks)
        return
    # As a uint8 array, ipyparallel sends the blob as one buffer, without a pickled copy.
    apply_on_ranks(cluster, values.stash, numpy.frombuffer(blob, dtype=numpy.uint8), ranks=[0])
    apply_on_ranks(cluster, values.share_values, 0)


class PullError(RuntimeError):
    """A pulled value could not be rebuilt in the kernel; the message names the fix."""


def pull(cluster: Cluster, expression: str, ranks: list[int]) -> dict[int, Any]:
    """Evaluate *expression* on each rank and return {rank: value}.

    The ranks send the value cloudpickled (classes of ``%%dist`` cells by value); it is
    rebuilt here, where a failure is an error with a remedy, not a hang.
    """
    if _same_host(cluster):
        try:
            outputs = apply_on_ranks(cluster, shm.evaluate, expression, ranks=ranks)
        except BaseException:
            # A rank raised (or the pull was interrupted) after others wrote their files.
            shm.remove_files_of(rank_pids(cluster))
            raise
        try:
            return {o.rank: _load(o.value, expression, o.rank) for o in outputs}
        finally:
            for o in outputs:  # mapped (or failed): nothing stays in /dev/shm
                shm.remove(o.value.path)
    outputs = apply_on_ranks(cluster, values.evaluate, expression, ranks=ranks)
    return {o.rank: _load(o.value, expression, o.rank) for o in outputs}


WARM_THREAD = "dist-notebook-warm"
_warm: threading.Thread | None = None


def warm_up() -> threading.Thread:
    """Import torch in the kernel in the background, once (the thread that does it): the
    first pull of tensors would otherwise wait 1-2 s for it (10 s under load) where later
    pulls take tens of ms. Importing torch initialises no CUDA."""
    global _warm
    if _warm is None:
        _warm = threading.Thread(
            target=importlib.import_module, args=("torch",), name=WARM_THREAD, daemon=True
        )
        _warm.start()
    return _warm


def warming() -> threading.Thread | None:
    """The kernel's background torch import while it goes (None: never started, or ended).

    Loading libtorch holds the GIL for long stretches: what must keep time meanwhile (a
    run's live view, display/dashboard.py) waits for it."""
    return _warm if _warm is not None and _warm.is_alive() else None


def rank_pids(cluster: Cluster) -> list[int]:
    """The pids of the cluster's local ranks (the writers of their pulls' files)."""
    return [r.pid for r in getattr(cluster, "ranks", []) if getattr(r, "pid", None)]


def _same_host(cluster: Cluster) -> bool:
    """Whether every rank runs on this host (the local launcher)."""
    spec = getattr(cluster, "spec", None)
    return getattr(spec, "launcher", "local") == "local"


def _load(blob: bytes | shm.Dumped, expression: str, rank: int) -> Any:
    try:
        if isinstance(blob, shm.Dumped):
            return shm.load(blob)
        return cloudpickle.loads(blob)
    except Exception as e:
        raise PullError(
            f"the value of {expression!r} on rank {rank} cannot be rebuilt in the notebook "
            f"({type(e).__name__}: {e}): import or define what it needs in the notebook "
            "too, or pull plain data (e.g. a dict of its fields or tensors)"
        ) from None
