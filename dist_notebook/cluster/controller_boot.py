"""Moved to ``dist_notebook.boot.controller``; this path only re-exports and starts it.

Kept so that ``python -m dist_notebook.cluster.controller_boot``, the controller command
line written before the move (a cluster file, a user's ``controller_cmd`` in launcher
config), still starts a controller. To monkeypatch, patch
``dist_notebook.boot.controller``.
"""

from __future__ import annotations

from ..boot.controller import STARTUP_PING_MS, STARTUP_PINGS_S, main

__all__ = ["STARTUP_PING_MS", "STARTUP_PINGS_S", "main"]

if __name__ == "__main__":
    main()
