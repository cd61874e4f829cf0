"""%dist_debug [RANK]: IPython's ``%debug``, on a rank.

The rank's own pdb (``engine/debug.py``) holds the post-mortem session; the kernel reads
each command through its stdin (``input()``, which a notebook answers with its input
box, as for ``%debug``) and sends it to that rank in one apply call. The rank is never
left blocked at a prompt: between commands it is idle, and ``q`` (or an interrupt, or an
empty front end) ends the session on the rank.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from IPython.core.error import StdinNotImplementedError, UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ..cluster import ClusterError
from ..cluster.onranks.execute import RankError, apply_on_ranks
from ..engine import debug as rank_debug
from .args import HELP, check_ranks, help_text, parse, rank_number
from .session import Session

if TYPE_CHECKING:
    from ..cluster.kind import Cluster

EXAMPLES = """
  %dist_debug          pdb on the rank that raised first in the last failed cell
  %dist_debug 1        pdb on rank 1's last failed cell
  breakpoint()         in a %%dist cell: pdb before the error instead, on rank 0 or
                       breakpoint(rank=N) (%%dist? lists the ways)
"""

# Bounds one pdb command on the rank (an expression that never returns is interrupted).
COMMAND_TIMEOUT_S = 60.0


# Errors with no traceback to walk: a rank that died, an interrupt, a pdb session's q.
NOT_DEBUGGABLE = ("RankDied", "KeyboardInterrupt", "BdbQuit")


def offer_debug(error: RankError) -> None:
    """End the rank's traceback with the way to debug it (its message stays one line)."""
    if error.ename in NOT_DEBUGGABLE:
        return
    line = (
        f"%dist_debug opens pdb where rank {error.rank} raised (%dist_debug N: rank N's);"
        " breakpoint() in the cell stops before it"
    )
    error.hint = f"{error.hint}\n{line}" if error.hint else line


def failed_rank() -> int | None:
    """The rank that raised first in the kernel's last error, if it was a rank's."""
    error = getattr(sys, "last_value", None)
    return error.rank if isinstance(error, RankError) else None


@magics_class
class DebugMagics(Magics):
    def __init__(self, shell: Any, session: Session) -> None:
        super().__init__(shell)
        self.session = session

    @magic_arguments("%dist_debug")
    @HELP
    @argument(
        "rank",
        nargs="?",
        type=rank_number,
        help="the rank to debug (default: the rank that raised first in the last failed cell)",
    )
    @help_text(EXAMPLES)
    @line_magic
    def dist_debug(self, line: str) -> None:
        """Open pdb on a rank's last traceback (post-mortem), as %debug does for the kernel:
        p, up, down, l, q and the other pdb commands; q returns to the notebook."""
        args = parse(self.dist_debug, line)
        if args is None:
            return
        cluster = self.session.ready_cluster()
        rank = args.rank if args.rank is not None else failed_rank()
        if rank is None:
            raise UsageError(
                "%dist_debug: the last error was not a rank's; name the rank, e.g. %dist_debug 0"
            )
        check_ranks([rank], cluster.n, flag="RANK")
        reply = self._call(cluster, rank, rank_debug.open_session)
        if reply["error"]:
            raise UsageError(
                f"%dist_debug: rank {rank} has {reply['error']} to debug; run the failing "
                "%%dist cell first, or name a rank that raised"
            )
        print(f"pdb on rank {rank} (q to quit)")
        self._loop(cluster, rank, reply)

    def _loop(self, cluster: Cluster, rank: int, reply: dict[str, Any]) -> None:
        prompt = f"(Pdb rank {rank}) "
        try:
            while not reply["ended"]:
                _show(reply["output"])
                try:
                    text = input(prompt)
                except EOFError:
                    text = "q"
                except StdinNotImplementedError:
                    raise UsageError(
                        "%dist_debug needs a front end that takes input (a notebook or "
                        "console), as %debug does"
                    ) from None
                reply = self._call(cluster, rank, rank_debug.command, text)
            _show(reply["output"])
        finally:
            if not reply["ended"]:  # interrupted at the prompt: end it on the rank too
                self._call(cluster, rank, rank_debug.close_session)
        print(f"pdb on rank {rank} ended")

    def _call(self, cluster: Cluster, rank: int, fn: Any, *args: Any) -> Any:
        try:
            outputs = apply_on_ranks(cluster, fn, *args, ranks=[rank], timeout=COMMAND_TIMEOUT_S)
        except (ClusterError, RankError, TimeoutError) as e:
            raise UsageError(f"%dist_debug: rank {rank} did not answer ({e})") from None
        out = outputs[0]
        if out.stdout:  # what the debugged code printed itself (e.g. !print(x))
            sys.stdout.write(out.stdout)
        if out.value is None:  # close_session
            return {"output": "", "ended": True, "error": ""}
        return out.value


def _show(text: str) -> None:
    if text:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
