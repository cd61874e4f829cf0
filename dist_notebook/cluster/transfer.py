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


def pull(cluster: Any, expression: str, ranks: list[int]) -> dict[int, Any]:
    """Evaluate *expression* on each rank and return {rank: value}."""
    outputs = apply_on_ranks(cluster, values.evaluate, expression, ranks=ranks)
    return {o.rank: o.value for o in outputs}
