"""``breakpoint()`` in a cell on the ranks: pdb on rank 0, a no-op on the others.

While the cell runs, the rank's main thread is in it, so no apply call can reach it (as
``%dist_debug``'s post-mortem uses). Instead this rank's pdb talks to the kernel over one
ZMQ REQ socket: each time pdb wants a line it sends what it printed and its prompt, and
waits for the line the user typed in the notebook (the kernel asks its stdin). An
interrupt ends the wait and the cell on this rank (pdb itself would swallow it).

Which ranks stop: the cell's ``--debug-ranks`` (default 0, ``all`` every rank), or the
call's own ``breakpoint(rank=1)`` (a rank, a list, ``"all"``). The others run on until
they wait for a stopped rank in a collective. ``torch.distributed.breakpoint(rank=1)``
stops that rank here too, and the others wait at its barrier, as torch does.

pdb opens at the breakpoint's own line (``-> breakpoint()``), not at the next event (a
``--Return--`` when it was a cell's last statement); ``n`` at the end of one of the cell's
top-level statements (IPython runs each as its own code object) goes to the next one.

The socket is a CURVE client with the keys ``install`` gets from the kernel (over the
ranks' own authenticated channel): the kernel's relay admits that key alone.
"""

from __future__ import annotations

import bdb
import io
import os
import pdb
import sys
from typing import IO, Any, cast

ALL = "all"  # every rank stops
_config: dict[str, Any] = {"endpoint": "", "ranks": (), "keys": {}}
HELD_TIMEOUT_S = 24 * 3600.0  # the default group's timeout while a breakpoint() cell runs

# Frames pdb steps over: the rank's kernel running the cell. IPython runs each top-level
# statement of a cell as its own code object; with these skipped, ``n`` on the last line
# of one goes to the next statement, not into IPython's run_code.
_SKIP = ["IPython.*", "ipykernel.*", "ipyparallel.*", "traitlets.*", "jupyter_client.*"]
_SKIP += ["asyncio.*", "tornado.*", "zmq.*", "contextlib", "codeop", "threading", "logging.*"]
_SKIP += ["dist_notebook.*"]


def install(endpoint: str, ranks: list[int] | str, keys: dict[str, str]) -> bool:
    """Route this rank's ``breakpoint()`` to the kernel at *endpoint* (pdb on *ranks*,
    or on every rank for ``"all"``), over CURVE with *keys* (``server``, ``public``,
    ``secret``: Z85), and ``torch.distributed.breakpoint`` with it."""
    _config.update(endpoint=endpoint, ranks=ranks if ranks == ALL else tuple(ranks), keys=keys)
    sys.breakpointhook = _hook
    import torch.distributed as dist

    dist.breakpoint = dist_breakpoint  # torch's reads /dev/stdin, which a rank has not
    return True


def hold_group() -> bool:
    """Before a ``breakpoint()`` cell: its collectives wait as long as a prompt stays open.
    False where this rank has no process group."""
    return _set_group_timeout(HELD_TIMEOUT_S)


def release_group(timeout_s: float) -> bool:
    """After the cell: the group's own timeout (the cluster's ``--timeout``) again."""
    return _set_group_timeout(timeout_s)


def _set_group_timeout(seconds: float) -> bool:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    from .. import privates

    privates.set_group_timeout(seconds)
    return True


def end() -> None:
    """After the cell: no tracing left on this rank (a cell that ended while stepping)."""
    sys.settrace(None)


def _hook(*args: Any, rank: Any = None, header: str | None = None, **kwargs: Any) -> None:
    """``breakpoint()``, ``breakpoint(rank=1)``, ``breakpoint(rank=[0, 1])``,
    ``breakpoint(rank="all")``: pdb on the chosen ranks, a no-op on the others."""
    if args or kwargs:
        raise TypeError(
            "breakpoint() on the ranks takes rank= (a rank, a list of ranks or 'all') and"
            f" header= only (got {', '.join([*map(repr, args), *kwargs])})"
        )
    chosen = _config["ranks"] if rank is None else _chosen(rank)
    _stop(sys._getframe(1), chosen, header)


def dist_breakpoint(rank: int = 0, skip: int = 0, timeout_s: float | None = 3600) -> None:
    """``torch.distributed.breakpoint`` on a rank of the notebook: pdb on *rank* in the
    notebook, and every rank waits at a barrier until it goes on, as torch's does. The
    group's timeout is lifted for the cell already (``hold_group``): *timeout_s* is unused."""
    import torch.distributed as dist

    caller = sys._getframe(1)
    if skip > 0:
        where = (caller.f_code.co_filename, caller.f_lineno)
        _skips[where] = _skips.get(where, 0) + 1
        if _skips[where] <= skip:
            return
    _stop(caller, _chosen(rank), None, "the other ranks wait at its barrier until this one goes on")
    dist.barrier()


_skips: dict[tuple[str, int], int] = {}


def _chosen(rank: Any) -> tuple[int, ...] | str:
    if rank == ALL:
        return ALL
    ranks = rank if isinstance(rank, list | tuple) else [rank]
    if not ranks or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        raise TypeError(
            f"breakpoint(rank=...) takes a rank, a list of ranks or 'all' (got {rank!r})"
        )
    return tuple(ranks)


def _stop(frame: Any, chosen: tuple[int, ...] | str, header: str | None, others: str = "") -> None:
    rank = int(os.environ.get("RANK", "-1"))
    if not _config["endpoint"] or (chosen != ALL and rank not in chosen):
        return  # not a debug rank: breakpoint() does nothing here
    debugger = _SocketPdb(_config["endpoint"], rank, _config["keys"])
    if chosen == ALL:
        others = "every rank stops here, each prompt names its rank"
    others = others or "the other ranks run on, and wait for this one in their next collective"
    debugger.message(
        f"{header + chr(10) if header else ''}breakpoint() on rank {rank}: {others}"
        " (c continues, q ends the cell on this rank)"
    )
    debugger.open_at(frame)


class _Channel:
    """pdb's stdin and stdout: output is buffered, and each read sends it with the prompt."""

    def __init__(self, endpoint: str, rank: int, keys: dict[str, str]) -> None:
        import zmq

        self.rank = rank
        self.buffer = io.StringIO()
        self.socket: Any = zmq.Context.instance().socket(zmq.REQ)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.CURVE_SERVERKEY, keys["server"].encode())
        self.socket.setsockopt(zmq.CURVE_PUBLICKEY, keys["public"].encode())
        self.socket.setsockopt(zmq.CURVE_SECRETKEY, keys["secret"].encode())
        self.socket.connect(endpoint)
        self.prompt = ""

    def write(self, text: str) -> int:
        return self.buffer.write(text)

    def flush(self) -> None:
        return None  # everything goes with the next request

    def _take(self) -> str:
        text = self.buffer.getvalue()
        self.buffer.seek(0)
        self.buffer.truncate()
        return text

    def readline(self, size: int | None = -1) -> str:
        text = self._take()
        if self.prompt and text.endswith(self.prompt):
            text = text[: -len(self.prompt)]
        self.socket.send_json({"rank": self.rank, "output": text, "prompt": self.prompt})
        reply = self._wait()
        return str(reply.get("line", "c")) + "\n"

    def send_output(self) -> None:
        text = self._take()
        if text and not self.socket.closed:
            self.socket.send_json({"rank": self.rank, "output": text, "prompt": None})
            self._wait()

    def _wait(self) -> Any:
        """The kernel's reply; short polls, so that an interrupt (SIGINT) ends the wait."""
        try:
            while not self.socket.poll(100):
                continue
        except KeyboardInterrupt:
            # pdb's command loop catches KeyboardInterrupt and asks again; end the session
            # and the cell instead, with the socket (its reply never read) closed.
            self.socket.close()
            sys.settrace(None)
            raise bdb.BdbQuit("interrupted at the pdb prompt") from None
        reply = self.socket.recv_json()
        return reply if isinstance(reply, dict) else {}


class _SocketPdb(pdb.Pdb):
    def __init__(self, endpoint: str, rank: int, keys: dict[str, str]) -> None:
        self.channel = _Channel(endpoint, rank, keys)
        stream = cast(IO[str], self.channel)  # the two methods pdb uses: readline, write
        super().__init__(stdin=stream, stdout=stream, skip=_SKIP, nosigint=True, readrc=False)
        self.use_rawinput = False
        self.prompt = self.channel.prompt = f"(Pdb rank {rank}) "

    def postloop(self) -> None:
        """After each run of commands (c, n, s, q): what pdb printed last goes out now."""
        self.channel.send_output()

    def open_at(self, frame: Any) -> None:
        """pdb at *frame*'s current line (the breakpoint's), then tracing as the command
        typed there asks (``set_trace`` would stop at the next event instead)."""
        self.reset()
        f = frame
        while f is not None:  # as bdb.set_trace: every frame up the stack is traced
            f.f_trace = self.trace_dispatch
            self.botframe = f
            f = f.f_back
        self.set_step()
        self.interaction(frame, None)
        if self.quitting:
            raise bdb.BdbQuit("q at the pdb prompt")
        if self.stoplineno == -1 and not self.breaks:
            return  # c with no breakpoint set: no tracing left
        sys.settrace(self.trace_dispatch)

    def user_call(self, frame: Any, argument_list: Any) -> None:
        if not _cell_statement(self, frame):  # a cell's next statement: its first line stops
            super().user_call(frame, argument_list)

    def user_return(self, frame: Any, return_value: Any) -> None:
        if _cell_statement(self, frame):
            # The end of one of the cell's statements (no --Return--): stop at the first line
            # of the next, which IPython calls as a code object of its own, and nowhere else
            # (stopping only in a frame that has ended: not in the kernel's frames between).
            self.set_until(sys._getframe())
            sys.settrace(self._next_statement)
            return
        super().user_return(frame, return_value)

    def _next_statement(self, frame: Any, event: str, arg: Any) -> Any:
        """The global trace between two of the cell's statements: only the next one."""
        if event == "call" and _cell_statement(self, frame):
            self.set_step()
            sys.settrace(self.trace_dispatch)
            return self.trace_dispatch(frame, event, arg)
        return None


def _cell_statement(debugger: pdb.Pdb, frame: Any) -> bool:
    """Whether *frame* runs one of the cell's top-level statements (IPython's run_code
    calls it: a ``<module>`` code object whose caller is a skipped module)."""
    caller = frame.f_back
    return (
        frame.f_code.co_name == "<module>"
        and caller is not None
        and debugger.is_skipped_module(caller.f_globals.get("__name__", ""))
    )
