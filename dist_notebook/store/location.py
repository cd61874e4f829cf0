"""Where the run store lives.

``DIST_NOTEBOOK_STORE`` names the SQLite file; without it the store is
``runs.sqlite`` in the per-user data directory (``$XDG_DATA_HOME/dist-notebook``,
``~/.local/share/dist-notebook`` by default).
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import envvars

ENV_VAR = envvars.STORE


def store_path() -> Path:
    """The path of the run store, from the environment or the per-user default."""
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(data_home) / "dist-notebook" / "runs.sqlite"
