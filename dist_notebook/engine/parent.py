"""Exit when the process that started us is gone.

ipyparallel's controller and engines outlive a killed kernel; each of our processes
watches the pid in ``DIST_NOTEBOOK_PARENT_PID`` and ends itself once it has been
re-parented, so no orphan keeps a port, a core or a GPU.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

ENV_VAR = "DIST_NOTEBOOK_PARENT_PID"


def _watch(parent: int, period: float, before_exit: Callable[[], None] | None) -> None:
    while True:
        # Re-parenting (to init or a subreaper) means the parent has exited.
        if os.getppid() != parent:
            try:
                if before_exit is not None:
                    before_exit()
            finally:
                os._exit(3)
        time.sleep(period)


def kill_children() -> None:
    """SIGKILL this process's descendants, before it ends without its own clean-up
    (an engine's nanny, the controller's schedulers: nobody else would end them)."""
    import contextlib

    import psutil

    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


def watch_pid(
    parent: int, period: float = 0.25, before_exit: Callable[[], None] | None = None
) -> None:
    """End this process (after *before_exit*) once *parent* is no longer its parent."""
    thread = threading.Thread(
        target=_watch,
        args=(parent, period, before_exit),
        name="dist-notebook-parent-watch",
        daemon=True,
    )
    thread.start()


def watch_parent(period: float = 0.25, before_exit: Callable[[], None] | None = None) -> bool:
    """Start the watcher when the environment names our parent; return whether it runs.

    *before_exit* runs once the parent is gone, just before this process ends.
    """
    value = os.environ.get(ENV_VAR)
    if not value:
        # Started by another launcher (MPI, SSH, Slurm): that launcher owns our lifetime.
        return False
    # The kernel names itself only to the processes it starts directly, so a parent
    # other than the one named means it died before this check ran (a kernel killed
    # during a start): end now, or nothing ever would.
    watch_pid(int(value), period, before_exit)
    return True
