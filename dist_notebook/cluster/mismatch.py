"""Moved to ``dist_notebook.cluster.onranks.mismatch``; this path only re-exports its names.

Kept so that imports by the old path (notebooks, scripts, modules not yet repointed) go
on working. A re-export is a second binding of the same object: to monkeypatch a name,
patch ``dist_notebook.cluster.onranks.mismatch``, which is where the code reads it.
"""

from __future__ import annotations

from .onranks.mismatch import (
    BUSY_EVERY,
    BUSY_FIRST,
    FINAL_WAIT,
    FIX,
    LOOK_EVERY,
    REPLY_WAIT,
    SETTLE,
    CollectiveMismatch,
    Watch,
    find,
    installed,
    prepare,
)

__all__ = [
    "BUSY_EVERY",
    "BUSY_FIRST",
    "FINAL_WAIT",
    "FIX",
    "LOOK_EVERY",
    "REPLY_WAIT",
    "SETTLE",
    "CollectiveMismatch",
    "find",
    "installed",
    "prepare",
    "Watch",
]
