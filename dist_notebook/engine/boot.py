"""Moved to ``dist_notebook.boot.engine``; this path only starts it.

Kept so that ``python -m dist_notebook.engine.boot``, the engine command line written
before the move (Slurm batch files, a user's ``engine_cmd`` in launcher config), still
starts an engine. To monkeypatch, patch ``dist_notebook.boot.engine``.
"""

from __future__ import annotations

from ..boot.engine import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
