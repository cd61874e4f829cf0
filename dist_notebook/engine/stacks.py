"""Dump every thread's Python stack on request, even when the rank is busy or stuck.

At boot, faulthandler is registered on SIGUSR1 to append all threads' stacks to a file
of this rank's in ``DIST_NOTEBOOK_STACK_DIR``. faulthandler writes from its C signal
handler, so the dump works while the main thread is in an endless loop or a blocked
call; nothing is killed.
"""

from __future__ import annotations

import faulthandler
import os
import signal
from typing import IO

from .. import envvars

_file: IO[str] | None = None


def stack_file(directory: str, rank: str) -> str:
    return os.path.join(directory, f"rank-{rank}.stacks")


def register() -> str | None:
    """Arm the dump on SIGUSR1; return the file it writes to (None without a directory)."""
    global _file
    directory = os.environ.get(envvars.STACK_DIR)
    if not directory or not hasattr(signal, "SIGUSR1"):
        return None
    if not os.path.isdir(directory):
        # The kernel's folder is not on this host (or was removed since): the rank
        # starts all the same, without the dump.
        return None
    path = stack_file(directory, os.environ.get("RANK", str(os.getpid())))
    _file = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    os.chmod(path, 0o600)
    faulthandler.register(signal.SIGUSR1, file=_file, all_threads=True, chain=False)
    return path
