"""Exit when the process that started us is gone.

ipyparallel's controller and engines outlive a killed kernel; each of our local
processes is named its parent in ``DIST_NOTEBOOK_PARENT_PID`` and ends with it, so no
orphan keeps a port, a core or a GPU. Two layers:

- The OS kernel signals us when the parent ends (Linux ``PR_SET_PDEATHSIG``,
  ``die_with_parent``). This needs no Python thread: an engine whose main thread holds
  the GIL in native code (gloo's destructor joining a stuck worker froze every Python
  thread of one) still ends. Engines, the fork server and the controller's schedulers
  take SIGKILL: they own no file that must go. The controller takes SIGTERM, which its
  handler turns into the clean-up below (it runs no user code: its main thread is
  ipyparallel's event loop, never blocked in native code with the GIL held).
  The signal follows the *thread* that started the process: the kernel starts ours
  from its main thread or from the cluster's event-loop thread (cluster/loop.py),
  both as long-lived as the kernel, never from a short-lived one.
- A watch thread (``watch_pid``) that polls for re-parenting and runs the process's
  clean-up first, where the OS signal is not available (not Linux).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from .. import envvars

ENV_VAR = envvars.PARENT_PID
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> bool:
    """Have the OS send *sig* to this process when *parent* ends; return whether it
    will. Ends this process at once when *parent* is gone already (it died before the
    request took effect, and no signal would ever come)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:
        os._exit(3)
    return True


def named_parent() -> int | None:
    """The pid the environment names as our parent, or None (another launcher's)."""
    value = os.environ.get(ENV_VAR, "")
    return int(value) if value.isdigit() else None


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


def watch_parent(
    period: float = 0.25,
    before_exit: Callable[[], None] | None = None,
    pdeath_signal: int = signal.SIGKILL,
) -> bool:
    """When the environment names our parent: have the OS send *pdeath_signal* at its
    death, and start the watch thread; return whether the parent is watched.

    *before_exit* runs once the watch thread sees the parent gone, just before this
    process ends (with SIGKILL from the OS first, it may never run: use it only for
    what may be skipped, or pass a signal whose handler calls it).
    """
    parent = named_parent()
    if parent is None:
        # Started by another launcher (MPI, SSH, Slurm): that launcher owns our lifetime.
        return False
    # The kernel names itself only to the processes it starts directly, so a parent
    # other than the one named means it died before this check ran (a kernel killed
    # during a start): end now, or nothing ever would.
    die_with_parent(parent, pdeath_signal)
    watch_pid(parent, period, before_exit)
    return True
