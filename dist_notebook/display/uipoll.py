"""Widget messages while a cell blocks: what lets the live view's Stop act in a plain cell.

A cell that waits on the ranks holds the kernel's main thread, so the kernel reads no
shell message (a click on Stop is a ``comm_msg``) until the cell ends. jupyter-ui-poll
solves this by running the kernel's message loop from inside the cell and holding back
the other requests it meets; with ipykernel 7 that loop is an asyncio loop already running
the cell, and a request taken out of the kernel's queue and put back was seen to run after
later ones (queued cells out of order). So nothing is taken from the main shell's queue.

The equivalent here uses ipykernel 7's subshells: a subshell is a thread with its own
message loop, and the kernel's shell-channel thread routes a comm's messages to the
subshell the comm names (``Comm._reply_subshell_for``). ``CommRoute`` creates one subshell
for the live view's comm and routes that comm's messages there: a click is handled on the
subshell's thread while the main thread waits on the ranks, and every other message keeps
its place in the main shell's queue. ``close()`` routes the comm back to the main shell
and deletes the subshell.

Where the kernel has no subshells (ipykernel 6, a terminal IPython), ``available`` is
False and the live view hides its Stop button in a blocking cell: the kernel's interrupt
stops the run, as it always does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("dist_notebook")
CREATE_TIMEOUT = 5.0  # seconds to wait for the shell-channel thread to make the subshell


def _manager(kernel: Any) -> Any:
    """ipykernel 7's subshell manager, or None."""
    manager = getattr(getattr(kernel, "shell_channel_thread", None), "manager", None)
    needed = ("_create_subshell", "_delete_subshell", "_shell_channel_io_loop")
    return manager if all(hasattr(manager, n) for n in needed) else None


def _on_shell_channel(manager: Any, fn: Callable[[], Any]) -> Any:
    """Run *fn* on the shell-channel thread (the subshells' one writer); its result."""
    done = threading.Event()
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["value"] = fn()
        except Exception as e:  # reported to the caller below, on its own thread
            box["error"] = e
        finally:
            done.set()

    manager._shell_channel_io_loop.add_callback(call)
    if not done.wait(CREATE_TIMEOUT):
        raise TimeoutError("the kernel's shell-channel thread did not answer")
    if "error" in box:
        raise box["error"]
    return box.get("value")


class CommRoute:
    """Sends one comm's messages from the front end to a subshell of their own."""

    def __init__(self, comm: Any, kernel: Any | None = None) -> None:
        if kernel is None:
            from IPython import get_ipython

            kernel = getattr(get_ipython(), "kernel", None)
        self.subshell: str | None = None
        self._comm = comm
        self._manager = _manager(kernel)
        if self._manager is None or comm is None:
            return
        try:
            self.subshell = _on_shell_channel(self._manager, self._manager._create_subshell)
        except (TimeoutError, RuntimeError, AssertionError) as e:
            log.warning("no subshell for the live view (its Stop needs the interrupt): %s", e)
            return
        subshell = self.subshell
        # Read by the shell-channel thread for each comm_msg of this comm.
        comm._reply_subshell_for = lambda _data, _default: subshell

    @property
    def available(self) -> bool:
        return self.subshell is not None

    def close(self) -> None:
        subshell, self.subshell = self.subshell, None
        if subshell is None:
            return
        # The comm may outlive the route (a widget kept open for a reloaded page): its
        # messages go back to the main shell, not to a subshell that no longer exists
        # (the kernel drops those, and a late page's request for the state got no answer).
        if self._comm is not None and "_reply_subshell_for" in vars(self._comm):
            del self._comm._reply_subshell_for
        try:
            _on_shell_channel(self._manager, lambda: self._manager._delete_subshell(subshell))
        except (TimeoutError, RuntimeError, KeyError) as e:
            log.warning("the live view's subshell was not deleted: %s", e)
