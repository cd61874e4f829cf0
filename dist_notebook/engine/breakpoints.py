"""``breakpoint()`` in a cell on the ranks: pdb on rank 0, a no-op on the others.

While the cell runs, the rank's main thread is in it, so no apply call can reach it (as
``%dist_debug``'s post-mortem uses). Instead this rank's pdb talks to the kernel over one
ZMQ REQ socket: each time pdb wants a line it sends what it printed and its prompt, and
waits for the line the user typed in the notebook (the kernel asks its stdin). An
interrupt ends the wait and the cell on this rank (pdb itself would swallow it).
"""

from __future__ import annotations

import bdb
import io
import os
import pdb
import sys
from typing import IO, Any, cast

_config: dict[str, Any] = {"endpoint": "", "ranks": ()}
HELD_TIMEOUT_S = 24 * 3600.0  # the default group's timeout while a breakpoint() cell runs

# Frames pdb steps over: the rank's kernel running the cell. IPython runs each top-level
# statement of a cell as its own code object; with these skipped, ``n`` on the last line
# of one goes to the next statement, not into IPython's run_code.
_SKIP = ["IPython.*", "ipykernel.*", "ipyparallel.*", "traitlets.*", "jupyter_client.*"]
_SKIP += ["asyncio.*", "tornado.*", "zmq.*", "contextlib", "codeop", "threading", "logging.*"]
_SKIP += ["dist_notebook.*"]


def install(endpoint: str, ranks: list[int]) -> bool:
    """Route this rank's ``breakpoint()`` to the kernel at *endpoint* (pdb on *ranks*)."""
    _config.update(endpoint=endpoint, ranks=tuple(ranks))
    sys.breakpointhook = _hook
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


def _hook(*args: Any, **kwargs: Any) -> None:
    rank = int(os.environ.get("RANK", "-1"))
    if rank not in _config["ranks"] or not _config["endpoint"]:
        return  # not a debug rank: breakpoint() does nothing here
    _SocketPdb(_config["endpoint"], rank).set_trace(sys._getframe().f_back)


class _Channel:
    """pdb's stdin and stdout: output is buffered, and each read sends it with the prompt."""

    def __init__(self, endpoint: str, rank: int) -> None:
        import zmq

        self.rank = rank
        self.buffer = io.StringIO()
        self.socket: Any = zmq.Context.instance().socket(zmq.REQ)
        self.socket.setsockopt(zmq.LINGER, 0)
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
    def __init__(self, endpoint: str, rank: int) -> None:
        self.channel = _Channel(endpoint, rank)
        stream = cast(IO[str], self.channel)  # the two methods pdb uses: readline, write
        super().__init__(stdin=stream, stdout=stream, skip=_SKIP, nosigint=True, readrc=False)
        self.use_rawinput = False
        self.prompt = self.channel.prompt = f"(Pdb rank {rank}) "

    def postloop(self) -> None:
        """After each run of commands (c, n, s, q): what pdb printed last goes out now."""
        self.channel.send_output()
