"""Moved to ``dist_notebook.boot.forkserver``; this path only re-exports and starts it.

Kept so that ``python -m dist_notebook.engine.forkserver``, the fork server's command
line before the move, still starts one. To monkeypatch, patch
``dist_notebook.boot.forkserver``.
"""

from __future__ import annotations

from ..boot.forkserver import (
    IDLE_AFTER_FORKS,
    IDLE_BEFORE_WARM,
    PARENT_POLL,
    STARTUP_VARS,
    main,
    serve,
)

__all__ = ["IDLE_AFTER_FORKS", "IDLE_BEFORE_WARM", "PARENT_POLL", "STARTUP_VARS", "main", "serve"]

if __name__ == "__main__":
    main()
