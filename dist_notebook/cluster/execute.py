"""Moved to ``dist_notebook.cluster.onranks.execute``; this path only re-exports its names.

Kept so that imports by the old path (notebooks, scripts, modules not yet repointed) go
on working. A re-export is a second binding of the same object: to monkeypatch a name,
patch ``dist_notebook.cluster.onranks.execute``, which is where the code reads it.
"""

from __future__ import annotations

from .onranks.execute import (
    OUTPUT_WAIT_S,
    PROMPTS,
    OutputSink,
    PromptClock,
    RankError,
    RankOutput,
    RanksInterrupted,
    absent_ranks_hint,
    apply_on_ranks,
    follow,
    interrupted_line,
    run_on_ranks,
    view_of,
)

__all__ = [
    "OUTPUT_WAIT_S",
    "PROMPTS",
    "absent_ranks_hint",
    "apply_on_ranks",
    "follow",
    "interrupted_line",
    "OutputSink",
    "PromptClock",
    "RankError",
    "RankOutput",
    "RanksInterrupted",
    "run_on_ranks",
    "view_of",
]
