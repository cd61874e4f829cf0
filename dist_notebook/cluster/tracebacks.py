"""How a cell's failure on the ranks reads in the notebook: like Python's own.

The raising rank's traceback is shown once, as the rank's IPython formatted it (its
colours included), under a header naming the rank, without ipyparallel's wrapper
(``[Engine Exception]``, ``[0:execute]``). Every other rank gets one line saying why it
stopped: the same error, the same kind with its own value, or (another kind, as a peer
freed from a collective gets) released after the raising rank's error.

Cell numbers are the notebook's: an engine counts the cells it ran itself (``Cell In[2]``
while the notebook shows ``[10]``). The frame of the cell that failed gets the notebook's
number of the cell now running; frames of cells the rank ran before get none ("an earlier
cell"), since the rank's count says nothing of the notebook's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

RED = "\x1b[0;31m"
BOLD_RED = "\x1b[1;31m"
RESET = "\x1b[0m"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINE_MAX = 160  # a released rank's own error, cut to one line
# IPython's "Cell In[2]", its two words possibly coloured apart.
_CELL = re.compile(r"Cell((?:\x1b\[[0-9;]*m|\s)*)In\[(\d+)\]")


def _plain(text: str) -> str:
    return _ANSI.sub("", text)


def _one_line(text: str) -> str:
    line = " ".join(_plain(text).split())
    return line if len(line) <= _LINE_MAX else line[: _LINE_MAX - 3] + "..."


def _shell() -> Any:
    from IPython import get_ipython

    return get_ipython()


def _colours() -> bool:
    """Whether the notebook's IPython shows colours (its ``%colors``), as its own
    tracebacks do."""
    shell = _shell()
    return shell is not None and str(getattr(shell, "colors", "nocolor")).lower() != "nocolor"


def notebook_cell() -> int | None:
    """The number the notebook shows for the cell running now (None: no notebook, or a
    cell kept out of the history).

    The running cell's own ExecutionResult has it: the shell's ``execution_count`` is
    already the next cell's in IPython 9 and still this one's in IPython 8.
    """
    running = getattr(getattr(_shell(), "displayhook", None), "exec_result", None)
    count = getattr(running, "execution_count", None)
    return count if isinstance(count, int) and count > 0 else None


def renumber(text: str, cell: int | None) -> str:
    """*text* (a rank's traceback) with the notebook's cell numbers, not the engine's.

    The first cell frame is the cell that ran (the top of the stack): it becomes
    ``Cell In[cell]`` (``This cell`` with no number known); any other engine cell number
    is a cell the rank ran earlier and becomes ``An earlier cell``.
    """
    failed: str | None = None

    def name(match: re.Match[str]) -> str:
        nonlocal failed
        failed = failed or match.group(2)
        if match.group(2) != failed:
            return "An earlier cell"
        return f"Cell{match.group(1)}In[{cell}]" if cell is not None else "This cell"

    return _CELL.sub(name, text)


def render(failures: Sequence[Any], ranks: Sequence[int], hint: str = "") -> list[str]:
    """Lines for IPython's ``_render_traceback_`` of a RankError (*failures*: RankOutputs
    with ``.error``, the first raising one first; *ranks*: every rank of the cell)."""
    lines = _render(failures, ranks, hint)
    return lines if _colours() else [_plain(line) for line in lines]


def _render(failures: Sequence[Any], ranks: Sequence[int], hint: str) -> list[str]:
    first = failures[0]
    error = first.error
    if error.ename == "RankDied":
        cause = f"rank {first.rank} died"
        lines = [f"{BOLD_RED}[rank {first.rank}] {error.evalue}{RESET}"]
    else:
        cause = f"rank {first.rank} raised {error.ename}"
        lines = [f"{BOLD_RED}--- rank {first.rank} raised {error.ename} ---{RESET}"]
        body = renumber(error.traceback, notebook_cell()) if error.traceback else ""
        lines += (body or f"{error.ename}: {error.evalue}").rstrip("\n").splitlines()
    by_rank = {f.rank: f.error for f in failures[1:] if f.error is not None}
    for rank in ranks:
        if rank == first.rank or rank not in by_rank:
            continue
        lines.append(f"{RED}[rank {rank}]{RESET} {_why(by_rank[rank], error, cause)}")
    if hint:
        lines.append(hint)
    return lines


def _why(own: Any, first: Any, cause: str) -> str:
    if own.ename == "RankDied":
        return own.evalue  # already says which rank, where, and what to do
    if own.ename == first.ename and own.evalue == first.evalue:
        return f"raised the same {own.ename}"
    if own.ename == first.ename:  # the same mistake with its own value: its own error
        return f"also raised {_one_line(f'{own.ename}: {own.evalue}')}"
    return f"released after {cause} (here: {_one_line(f'{own.ename}: {own.evalue}')})"
