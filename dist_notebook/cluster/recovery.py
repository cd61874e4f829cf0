"""Moved to ``dist_notebook.cluster.onranks.recovery``; this path only re-exports its names.

Kept so that imports by the old path (notebooks, scripts, modules not yet repointed) go
on working. A re-export is a second binding of the same object: to monkeypatch a name,
patch ``dist_notebook.cluster.onranks.recovery``, which is where the code reads it.
"""

from __future__ import annotations

from .onranks.recovery import (
    GRACE,
    Release,
    log,
    regroup,
)

__all__ = [
    "GRACE",
    "log",
    "regroup",
    "Release",
]
