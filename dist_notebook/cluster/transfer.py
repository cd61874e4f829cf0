"""Moved to ``dist_notebook.cluster.onranks.transfer``; this path only re-exports its names.

Kept so that imports by the old path (notebooks, scripts, modules not yet repointed) go
on working. A re-export is a second binding of the same object: to monkeypatch a name,
patch ``dist_notebook.cluster.onranks.transfer``, which is where the code reads it.
"""

from __future__ import annotations

from .onranks.transfer import (
    WARM_THREAD,
    PullError,
    pull,
    push,
    rank_pids,
    warm_up,
    warming,
)

__all__ = [
    "WARM_THREAD",
    "pull",
    "PullError",
    "push",
    "rank_pids",
    "warm_up",
    "warming",
]
