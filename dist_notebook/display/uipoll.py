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

A page reloaded (or a second tab opened) while the cell blocks restores its widgets from
the kernel: its widget manager asks for ``kernel_info`` and ``comm_info``, opens a comm of
the ``jupyter.widget.control`` target and asks it for every model's state (or, failing
that, each widget comm for its own). Those requests carry no comm of ours, so
``RestoreRoute`` routes them too, for the time the cell blocks: the shell-channel thread's
receive callback is wrapped so that these requests (and only these; they read state, they
change none) go to the same subshell, everything else as before. A request that is not a
comm message must name its subshell in its header, so it is re-signed with the kernel's
own key after its signature was checked.

While the route is open, the kernel reads busy to every front end (``BlockedCell``):
ipykernel publishes busy then idle for every message a subshell (or the control channel)
handles, and JupyterLab's status bar (and the server's execution_state) follow the last
status of any parent, so the live view's first message made the kernel read "Idle" for
the rest of the cell. Each such idle is followed by a busy with the running cell's own
request as parent (the idle itself stays: a reloaded page's kernel_info request is done
only once its idle arrives). The same object answers a reloaded page that asks which
cell runs (a comm of ``RUNNING_TARGET``: the labextension marks that cell ``[*]``).

All of ipykernel's private names used here are in ``PRIVATE`` and checked by
``_manager`` (``dist_notebook.privates.PRIVATES`` lists them too, for its test against the
installed ipykernel). Where the kernel lacks one (ipykernel 6, a terminal IPython, a later
ipykernel that renamed them), ``available`` is False: the live view hides its Stop button
in a blocking cell (the kernel's interrupt stops the run, as it always does) and a page
reloaded during the cell gets its chart once the cell has ended.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from jupyter_client.session import DELIM

from .. import privates

log = logging.getLogger("dist_notebook")
CREATE_TIMEOUT = 5.0  # seconds to wait for the shell-channel thread to make the subshell

# ipykernel 7's private names this module uses (ipykernel 7.0-7.4), in one place.
PRIVATE = {
    "kernel": (
        "shell_channel_thread",
        "shell_stream",
        "shell_channel_thread_main",
        "_publish_status",
    ),
    "shell_channel_thread": ("manager", "asyncio_lock"),
    "manager": (
        "_create_subshell",
        "_delete_subshell",
        "_shell_channel_io_loop",
        "get_shell_channel_to_subshell_socket",
    ),
    "comm": ("_reply_subshell_for",),  # read by the shell-channel thread, set here
}
# What a reloaded page's widget manager asks while restoring its widgets.
RESTORE_REQUESTS = frozenset({"kernel_info_request", "comm_info_request"})
CONTROL_TARGET = "jupyter.widget.control"  # ipywidgets' comm for all models' states
# A front end's question "which cell runs?" (extension/src/runningcell.ts asks it).
RUNNING_TARGET = "dist_notebook.running"


def _manager(kernel: Any) -> Any:
    """ipykernel 7's subshell manager, or None where a private name of PRIVATE is missing."""
    if not all(hasattr(kernel, n) for n in PRIVATE["kernel"]):
        return None
    thread: Any = kernel.shell_channel_thread
    if not all(hasattr(thread, n) for n in PRIVATE["shell_channel_thread"]):
        return None
    # The comm attribute is a name the kernel's routing reads (a constant of its code).
    route = getattr(privates.shell_receive_callback(kernel), "__code__", None)
    if route is None or not set(PRIVATE["comm"]) <= set(route.co_consts):
        return None
    manager = thread.manager
    return manager if all(hasattr(manager, n) for n in PRIVATE["manager"]) else None


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

    privates.on_shell_channel_loop(manager, call)
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
            manager = self._manager
            self.subshell = _on_shell_channel(manager, lambda: privates.create_subshell(manager))
        except (TimeoutError, RuntimeError, AssertionError) as e:
            log.warning("no subshell for the live view (its Stop needs the interrupt): %s", e)
            return
        subshell = self.subshell
        self._blocked = BlockedCell(kernel)
        # Read by the shell-channel thread for each comm_msg of this comm.
        privates.route_comm(comm, subshell)
        self._restore: RestoreRoute | None = None
        try:
            self._restore = RestoreRoute(kernel, self._manager, subshell)
        except (TimeoutError, RuntimeError) as e:
            log.warning("a page reloaded during this cell gets its chart at the end: %s", e)

    @property
    def available(self) -> bool:
        return self.subshell is not None

    def close(self) -> None:
        subshell, self.subshell = self.subshell, None
        if subshell is None:
            return
        self._blocked.close()
        if self._restore is not None:
            self._restore.close()
        # The comm may outlive the route (a widget kept open for a reloaded page): its
        # messages go back to the main shell, not to a subshell that no longer exists
        # (the kernel drops those, and a late page's request for the state got no answer).
        if self._comm is not None:
            privates.unroute_comm(self._comm)
        try:
            manager = self._manager
            _on_shell_channel(manager, lambda: privates.delete_subshell(manager, subshell))
        except (TimeoutError, RuntimeError, KeyError) as e:
            log.warning("the live view's subshell was not deleted: %s", e)


class RestoreRoute:
    """While a cell blocks: a reloaded page's widget-restore requests go to *subshell*.

    The shell-channel thread's receive callback is wrapped (``on_recv`` replaces it) and
    put back by ``close()``. Diverted: ``RESTORE_REQUESTS``; a ``comm_open`` of the
    ``CONTROL_TARGET`` and that comm's later messages; a widget comm's ``request_state``.
    Every other message takes the kernel's own path, in its order.
    """

    def __init__(self, kernel: Any, manager: Any, subshell: str) -> None:
        self._kernel = kernel
        self._manager = manager
        self._subshell = subshell
        self._session = kernel.session
        self._original = privates.shell_receive_callback(kernel)
        self._lock = privates.shell_channel_lock(kernel)
        self._control: set[str] = set()  # the control comms opened through this route
        self.diverted: list[str] = []  # msg_types sent to the subshell (for tests)
        stream = kernel.shell_stream
        _on_shell_channel(manager, lambda: stream.on_recv(self._receive, copy=False))
        self._closed = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        stream, original = self._kernel.shell_stream, self._original
        try:
            _on_shell_channel(self._manager, lambda: stream.on_recv(original, copy=False))
        except (TimeoutError, RuntimeError) as e:
            log.warning("the kernel's shell receive callback was not put back: %s", e)

    async def _receive(self, frames: list[Any]) -> None:
        """On the shell-channel thread: one message from the front end."""
        try:
            out = self._diverted(frames)
        except Exception as e:  # a malformed message: the kernel's own path reports it
            log.debug("not diverted: %s", e)
            out = None
        if out is None:
            await self._original(frames)
            return
        # Under the kernel's lock, as its own routing: messages keep their arrival order.
        async with self._lock:
            socket = privates.subshell_socket(self._manager, self._subshell)
            socket.send_multipart(out, copy=False)

    def _diverted(self, frames: list[Any]) -> list[Any] | None:
        """The frames to send to the subshell, or None for the kernel's own path."""
        session = self._session
        idents, msg_list = session.feed_identities(frames, copy=False)
        # Checks the signature (and that it was never seen) without keeping it.
        msg = session.deserialize(msg_list, content=False, copy=False)
        kind = msg["header"]["msg_type"]
        if kind in RESTORE_REQUESTS:
            return self._resigned(idents, msg_list, kind)
        if kind not in ("comm_open", "comm_msg", "comm_close"):
            return None
        content = session.unpack(bytes(msg_list[4].bytes))
        comm_id = content.get("comm_id")
        if kind == "comm_open":
            target = content.get("target_name")
            if target == RUNNING_TARGET:  # answered at once, never waits for the cell
                return self._resigned(idents, msg_list, kind)
            if target != CONTROL_TARGET:
                return None
            self._control.add(comm_id)
            return self._resigned(idents, msg_list, kind)
        data = content.get("data")
        state_asked = isinstance(data, dict) and data.get("method") == "request_state"
        if comm_id in self._control or (kind == "comm_msg" and state_asked):
            self.diverted.append(kind)
            return frames  # a comm message may go to any subshell as it is
        return None

    def _resigned(self, idents: list[bytes], msg_list: list[Any], kind: str) -> list[Any]:
        """The message with its header naming the subshell, signed with the kernel's key."""
        session = self._session
        parts = [bytes(m.bytes) for m in msg_list[1:5]]
        header = session.unpack(parts[0])
        header["subshell_id"] = self._subshell
        parts[0] = session.pack(header)
        self.diverted.append(kind)
        return [*idents, DELIM, session.sign(parts), *parts, *msg_list[5:]]


class BlockedCell:
    """While a cell blocks: the kernel reads busy, and says which cell runs when asked.

    Made on the main thread inside the cell (its parent is the cell's execute_request);
    ``close()`` before the cell's end. The kernel's ``_publish_status`` is wrapped: after an
    idle of any other parent (a subshell's message, a control request) a busy follows, with
    the cell's request as parent, under a lock ``close()`` takes too, so no busy can follow
    the cell's own idle. The cell's own idle (a route never closed) ends it as well.
    """

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel
        self._lock = threading.Lock()
        self._on = False
        self.cell_id = ""
        cell = kernel.get_parent("shell") if hasattr(kernel, "get_parent") else None
        if not isinstance(cell, dict):
            return
        header = cell.get("header") or {}
        if header.get("msg_type") != "execute_request":
            return  # not inside a cell a front end sent (a script, a test's thread)
        self._cell: dict[str, Any] = cell
        self._cell_msg_id = header.get("msg_id")
        metadata = cell.get("metadata") or {}
        self.cell_id = str(metadata.get("cellId") or "")  # JupyterLab's cell id, if sent
        self._original = privates.publish_status(kernel)
        self._wrapper = self._publish  # one bound method: restore compares it by identity
        privates.replace_publish_status(kernel, self._wrapper)
        from comm import get_comm_manager

        self._comms = get_comm_manager()
        self._comms.register_target(RUNNING_TARGET, self._answer)
        self._on = True

    def _publish(self, status: str, channel: str, parent: Any = None) -> None:
        """The kernel's ``_publish_status``, then the cell's busy after another's idle."""
        with self._lock:
            self._original(status, channel, parent)
            if not self._on or status != "idle":
                return
            of = parent or self._kernel.get_parent(channel)
            if (of or {}).get("header", {}).get("msg_id") == self._cell_msg_id:
                self._end()  # the cell's own idle: it is over
                return
            self._original("busy", "shell", self._cell)

    def _answer(self, comm: Any, _msg: Any) -> None:
        """On a subshell: which cell runs (its id and the request's ``msg_id``)."""
        with self._lock:
            running = self._on
        comm.send({"cell_id": self.cell_id if running else "", "msg_id": self._cell_msg_id})
        comm.close()

    def _end(self) -> None:
        self._on = False
        privates.restore_publish_status(self._kernel, self._wrapper)
        self._comms.unregister_target(RUNNING_TARGET, self._answer)

    def close(self) -> None:
        with self._lock:
            if self._on:
                self._end()
