"""Moved to ``dist_notebook.cluster.onranks.tracebacks``; this path only re-exports its names.

Kept so that imports by the old path (notebooks, scripts, modules not yet repointed) go
on working. A re-export is a second binding of the same object: to monkeypatch a name,
patch ``dist_notebook.cluster.onranks.tracebacks``, which is where the code reads it.
"""

from __future__ import annotations

from .onranks.tracebacks import (
    BOLD_RED,
    RED,
    RESET,
    notebook_cell,
    rank_label,
    rank_set,
    render,
    renumber,
)

__all__ = [
    "BOLD_RED",
    "RED",
    "RESET",
    "notebook_cell",
    "rank_label",
    "rank_set",
    "render",
    "renumber",
]
