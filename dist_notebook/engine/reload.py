"""IPython's autoreload on this rank: modules edited on disk are reloaded before each cell.

The kernel's ``%dist_autoreload on|off`` calls :func:`set_autoreload` on every rank. The
extension hooks the rank's ``pre_run_cell``, which each ``%%dist`` / ``%%dist_train`` cell
fires (ipyparallel runs cells through the rank's IPython).
"""

from __future__ import annotations

from typing import Any

_FLAG = "_dist_notebook_autoreload"


def _shell() -> Any:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not running inside an engine")
    return shell


def set_autoreload(on: bool | None) -> bool:
    """Turn autoreload on (mode 2: every module) or off; None: leave it. Returns the state."""
    shell = _shell()
    if on is True:
        shell.run_line_magic("load_ext", "autoreload")
        shell.run_line_magic("autoreload", "2")
        setattr(shell, _FLAG, True)
    elif on is False and getattr(shell, _FLAG, False):
        shell.run_line_magic("autoreload", "off")
        setattr(shell, _FLAG, False)
    return bool(getattr(shell, _FLAG, False))
