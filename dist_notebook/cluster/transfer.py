"""Move values between the kernel and the ranks: push names out, pull expressions back."""

from __future__ import annotations

from typing import Any

import cloudpickle
import numpy

from ..engine import values
from .execute import apply_on_ranks


def push(cluster: Any, mapping: dict[str, Any], ranks: list[int] | None = None) -> None:
    """Bind each name of *mapping* on every rank (cloudpickle: functions and instances
    defined in the notebook travel too; define classes with %%dist instead).

    To every rank, the value goes once to rank 0 through ipyparallel and from there
    over the process group; to some ranks, it goes to each of them directly.
    """
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


def pull(cluster: Any, expression: str, ranks: list[int]) -> dict[int, Any]:
    """Evaluate *expression* on each rank and return {rank: value}.

    The ranks send the value cloudpickled (classes of ``%%dist`` cells by value); it is
    rebuilt here, where a failure is an error with a remedy, not a hang.
    """
    outputs = apply_on_ranks(cluster, values.evaluate, expression, ranks=ranks)
    return {o.rank: _load(o.value, expression, o.rank) for o in outputs}


def _load(blob: bytes, expression: str, rank: int) -> Any:
    try:
        return cloudpickle.loads(blob)
    except Exception as e:
        raise PullError(
            f"the value of {expression!r} on rank {rank} cannot be rebuilt in the notebook "
            f"({type(e).__name__}: {e}): import or define what it needs in the notebook "
            "too, or pull plain data (e.g. a dict of its fields or tensors)"
        ) from None
