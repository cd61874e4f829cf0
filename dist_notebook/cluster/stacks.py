"""Moved to ``dist_notebook.cluster.onranks.stacks``; this path only re-exports its names.

Kept so that imports by the old path (notebooks, scripts, modules not yet repointed) go
on working. A re-export is a second binding of the same object: to monkeypatch a name,
patch ``dist_notebook.cluster.onranks.stacks``, which is where the code reads it.
"""

from __future__ import annotations

from .onranks.stacks import (
    StacksError,
    collect_stacks,
)

__all__ = [
    "collect_stacks",
    "StacksError",
]
