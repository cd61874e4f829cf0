"""Widget messages while a cell blocks: what lets the live view's Stop act in a plain cell.

A cell that waits on the ranks holds the kernel's main thread, so the kernel reads no
shell message (a click on Stop is a ``comm_msg``) until the cell ends. jupyter-ui-poll
solves this by running the kernel's message loop from inside the cell; with ipykernel 7
that loop is an asyncio loop already running the cell, which cannot be re-entered. The
equivalent here: ipykernel 7 hands the main shell's messages from its shell-channel
thread to the main thread over an inproc socket. ``UiPoll()`` (called every ~50 ms from
the waiting loop, on the main thread, which owns that socket) takes what is waiting
there: comm messages are handled at once, as the kernel would handle them; anything else
(the next cell's execute_request, a completion request ...) is put back in the kernel's
own queue, in order, to run after this cell, exactly as it would have.

Where the kernel is not laid out so (another ipykernel, a terminal IPython), ``available``
is False and the live view's Stop button is hidden in a blocking cell: the kernel's
interrupt then stops the run, as it always does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import zmq

log = logging.getLogger("dist_notebook")
COMM_MESSAGES = frozenset({"comm_open", "comm_msg", "comm_close"})


def _main_shell_socket(kernel: Any) -> Any:
    """The socket the main thread reads its shell messages from, or None."""
    thread = getattr(kernel, "shell_channel_thread", None)
    manager = getattr(thread, "manager", None)
    pair = getattr(manager, "get_shell_channel_to_subshell_pair", None)
    if pair is None:
        return None
    try:
        return pair(None).to_socket
    except (AttributeError, KeyError) as e:
        log.debug("no main shell socket: %s", e)
        return None


class UiPoll:
    """Handles the comm messages waiting for the kernel; call it on the main thread."""

    def __init__(self, kernel: Any | None = None) -> None:
        if kernel is None:
            from IPython import get_ipython

            kernel = getattr(get_ipython(), "kernel", None)
        self.kernel: Any = kernel
        self.socket = _main_shell_socket(kernel) if kernel is not None else None
        self.handled = 0
        self.deferred = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        if self.socket is not None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                self.socket = None  # not inside the kernel's loop: nothing to put back into

    @property
    def available(self) -> bool:
        return self.socket is not None

    def __call__(self) -> None:
        if self.socket is None:
            return
        while self.socket.poll(0, zmq.POLLIN):
            frames = self.socket.recv_multipart(copy=False)
            self._dispatch(frames)

    def _dispatch(self, frames: list[Any]) -> None:
        kernel = self.kernel
        idents, rest = kernel.session.feed_identities(frames, copy=False)
        try:
            msg = kernel.session.deserialize(rest, content=True, copy=False)
        except ValueError as e:
            log.warning("dropped an invalid shell message: %s", e)
            return
        kind = msg["header"]["msg_type"]
        if kind not in COMM_MESSAGES:
            self._defer(frames)
            return
        handler = kernel.shell_handlers.get(kind)
        parent = kernel.get_parent("shell")
        ident = kernel._get_shell_context_var(kernel._shell_parent_ident)
        try:
            kernel.set_parent(idents, msg, channel="shell")
            handler(None, idents, msg)
            self.handled += 1
        finally:
            # The cell's own output must keep going to the cell.
            kernel.set_parent(ident, parent, channel="shell")

    def _defer(self, frames: list[Any]) -> None:
        # Queued behind the running cell (shell_main waits on the main shell's lock),
        # in arrival order, before anything the socket receives later.
        assert self._loop is not None
        self._loop.create_task(self.kernel.shell_main(None, frames))
        self.deferred += 1
