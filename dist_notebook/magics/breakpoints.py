"""``breakpoint()`` in a cell on the ranks stops rank 0 (or ``--debug-ranks``) in pdb.

Before a cell that runs on the ranks and calls ``breakpoint()``, the ranks get a
breakpoint hook (``engine/breakpoints.py``): rank 0's pdb sends its output and prompt to a
ZMQ REP socket here; the others' ``breakpoint()`` does nothing. A thread of the kernel
answers each prompt with a line from the notebook's stdin (an ``input_request`` of the
running cell, as ``input()`` makes), and stops asking as soon as the cell ends (an
interrupt included), so the kernel's stdin is never left to a dead prompt.

ipykernel asks its stdin from the main thread only, which is waiting for the ranks here;
this module sends the request itself on the kernel's stdin socket (``kernel.session``,
``kernel.stdin_socket``, and the running cell's ident and parent header).

Any local user can reach the relay's port. It is a CURVE server, on a ZMQ context of its
own, that admits one client key, which the ranks get with the hook (over their own
authenticated channel): a peer without it never completes the handshake, so nothing it
sends is read, written into the cell or answered. Frames are bounded (``MAX_BYTES``).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from typing import Any

from IPython.core.error import UsageError

from .. import privates
from ..cluster import ClusterState
from ..cluster.onranks.execute import PROMPTS, apply_on_ranks, view_of
from ..engine import breakpoints as rank_breakpoints
from .args import parse_words, parser_of, split_words
from .complete import rank_of_cell
from .session import Session

log = logging.getLogger(__name__)
DEBUG_RANKS = [0]
_POLL_S = 0.05
MAX_BYTES = 16 << 20  # a prompt and its output


class BreakpointRelay:
    def __init__(self, shell: Any, session: Session, auto: Any) -> None:
        self.shell = shell
        self.session = session
        self.auto = auto
        self._socket: Any = None
        self._endpoint = ""
        self.keys: dict[str, str] = {}  # the ranks' side of the CURVE link (Z85)
        self._installed: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
        self._debug: list[int] = list(DEBUG_RANKS)  # the ranks of the running cell
        # The running cell's (ident, parent header, whether its front end takes input, the
        # event set when it ends). Each cell has its own event: a prompt of an interrupted
        # cell stops waiting even when the next cell has begun.
        self._cell: tuple[Any, Any, bool, threading.Event] | None = None
        self._stopped = False  # a rank's pdb spoke during the running cell
        self._held = False  # the ranks' group timeout is lifted for the running cell

    @property
    def endpoint(self) -> str:
        """Where the ranks' pdb reach this relay ("" until a cell's breakpoint starts it)."""
        return self._endpoint

    # --- the kernel's main thread --------------------------------------------------------

    def before_cell(self, info: Any) -> None:
        cell = getattr(info, "raw_cell", "") or ""
        if "breakpoint(" not in cell or rank_of_cell(cell, None, self.auto()) is None:
            return
        cluster = self.session.cluster
        kernel = getattr(self.shell, "kernel", None)
        if cluster is None or cluster.state != ClusterState.READY or kernel is None:
            return
        if not self._endpoint:
            self._start(cluster.spec.ip)
        debug_ranks = self._debug_ranks(cell, cluster.n)
        installed = (tuple(cluster.engine_ids()), tuple(debug_ranks))
        if installed != self._installed:
            apply_on_ranks(
                cluster, rank_breakpoints.install, self._endpoint, debug_ranks, self.keys
            )
            self._installed = installed
        # Peers may wait in a collective for a rank at the prompt: no torch timeout then.
        apply_on_ranks(cluster, rank_breakpoints.hold_group)
        self._held = True
        self._debug = debug_ranks
        ident = privates.shell_parent_ident(kernel)
        over = threading.Event()
        self._cell = (ident, kernel.get_parent("shell"), privates.allow_stdin(kernel), over)

    def after_cell(self, result: Any = None) -> None:
        cell, self._cell = self._cell, None
        if cell is not None:
            cell[3].set()
        held, stopped, self._held, self._stopped = self._held, self._stopped, False, False
        cluster = self.session.cluster
        if cluster is None or cluster.state != ClusterState.READY or not cluster.client:
            return
        # Neither is waited for: each runs on a rank once the cell there ends.
        if held:  # the group's own timeout again
            view_of(cluster.client, cluster.engine_ids()).apply_async(
                rank_breakpoints.release_group, cluster.spec.timeout
            )
        if stopped:  # a rank stopped in this cell (breakpoint(rank=...): any): no tracing left
            view_of(cluster.client, cluster.engine_ids()).apply_async(rank_breakpoints.end)

    def _debug_ranks(self, cell: str, n: int) -> list[int]:
        """The ranks of the cell's ``%%dist --debug-ranks LIST`` (default: rank 0); a
        wrong list is the magic's to refuse, with its message."""
        first = cell.lstrip().split("\n", 1)[0]
        if not first.startswith("%%dist ") or "--debug-ranks" not in first:
            return list(DEBUG_RANKS)
        try:
            args = parse_words(
                parser_of(self.shell.find_cell_magic("dist")), split_words(first[7:])
            )
        except (UsageError, ValueError):
            return list(DEBUG_RANKS)
        ranks = [r for r in (args.debug_ranks or DEBUG_RANKS) if 0 <= r < n]
        return ranks or list(DEBUG_RANKS)

    def _start(self, ip: str) -> None:
        import zmq
        from zmq.auth.thread import ThreadAuthenticator

        from ..detached.link import OneClient

        # A context of its own: one ZAP handler per context, and the kernel's may have one.
        self._ctx: Any = zmq.Context()
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        self._auth = ThreadAuthenticator(self._ctx, log=logging.getLogger("dist_notebook.zap"))
        self._auth.start()
        self._auth.configure_curve_callback("*", OneClient(client_public))
        self.keys = {
            "server": server_public.decode(),
            "public": client_public.decode(),
            "secret": client_secret.decode(),
        }
        self._socket = self._ctx.socket(zmq.REP)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_BYTES)
        self._socket.curve_server = True
        self._socket.curve_secretkey = server_secret
        port = self._socket.bind_to_random_port(f"tcp://{ip}")
        self._endpoint = f"tcp://{ip}:{port}"
        threading.Thread(target=self._serve, name="dist-breakpoints", daemon=True).start()

    # --- the relay's thread ----------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            try:
                request = json.loads(self._socket.recv())
            except ValueError:  # not JSON: the rank goes on (c)
                request = None
            if not isinstance(request, dict):
                self._socket.send_json({"line": "c"})
                continue
            self._stopped = True
            line = "c"
            try:
                if request.get("output"):
                    self._write(request["output"])
                if request.get("prompt") is not None:
                    line = self._read(request["prompt"])
            except Exception:  # the rank goes on (c); the relay must live for the next one
                log.exception("breakpoint relay: answering rank %s", request.get("rank"))
            self._socket.send_json({"line": line})

    def _write(self, text: str) -> None:
        """Output into the running cell (this thread has no cell of its own)."""
        cell = self._cell
        set_parent = getattr(sys.stdout, "set_thread_parent", None)
        if cell is not None and set_parent is not None:
            set_parent(cell[1])
        sys.stdout.write(text)
        sys.stdout.flush()

    def _read(self, prompt: str) -> str:
        """A line from the notebook for *prompt*; ``c`` once the cell is over or the front
        end takes no input."""
        cell = self._cell
        if cell is None or not cell[2]:
            self._write(
                "breakpoint() continued: this front end takes no input (run the cell from "
                "a notebook or console to debug it)\n"
            )
            return "c"
        kernel = self.shell.kernel
        ident, parent, _, over = cell
        content = {"prompt": prompt, "password": False}
        kernel.session.send(kernel.stdin_socket, "input_request", content, parent, ident=ident)
        PROMPTS.begin()  # the cell's --timeout and the collective watch wait meanwhile
        try:
            while not over.is_set():
                if kernel.stdin_socket.poll(int(_POLL_S * 1000)):
                    _, reply = kernel.session.recv(kernel.stdin_socket)
                    if reply is not None and reply.get("msg_type") == "input_reply":
                        value = str(reply["content"].get("value", ""))
                        return "q" if value == "\x04" else value
            return "c"
        finally:
            PROMPTS.end()


_by_shell: dict[int, BreakpointRelay] = {}


def register(shell: Any, session: Session, auto: Any) -> BreakpointRelay:
    old = _by_shell.get(id(shell))
    if old is not None:  # %reload_ext: the new hooks replace the old ones
        shell.events.unregister("pre_run_cell", old.before_cell)
        shell.events.unregister("post_run_cell", old.after_cell)
    relay = _by_shell[id(shell)] = BreakpointRelay(shell, session, auto)
    shell.events.register("pre_run_cell", relay.before_cell)
    shell.events.register("post_run_cell", relay.after_cell)
    return relay
