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

At scale the same error on many ranks reads once: ranks that raised the same error share
the header (``--- ranks 0-63 raised ValueError ---``), and the other ranks' lines are
folded by what they say (``[ranks 0,2-63] released after rank 1 raised ...``), each
different error once. ``fold=False`` (``%%dist --no-fold``) keeps a line per rank.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

RED = "\x1b[0;31m"
BOLD_RED = "\x1b[1;31m"
RESET = "\x1b[0m"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINE_MAX = 160  # a released rank's own error, cut to one line
# IPython's "Cell In[2]", its two words possibly coloured apart.
_CELL = re.compile(r"Cell((?:\x1b\[[0-9;]*m|\s)*)In\[(\d+)\]")


def rank_set(ranks: Iterable[int]) -> str:
    """Ranks written compactly: ``0-3,5,8-63`` (a run of three or more as first-last)."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    return ",".join(
        f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)) for run in runs
    )


def rank_label(ranks: Iterable[int]) -> str:
    """``rank 3`` or ``ranks 0-3,5``: how output and errors name the ranks they come from."""
    unique = sorted(set(ranks))
    return f"rank {unique[0]}" if len(unique) == 1 else f"ranks {rank_set(unique)}"


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


def render(
    failures: Sequence[Any], ranks: Sequence[int], hint: str = "", fold: bool = True
) -> list[str]:
    """Lines for IPython's ``_render_traceback_`` of a RankError (*failures*: RankOutputs
    with ``.error``, the first raising one first; *ranks*: every rank of the cell).
    *fold* False: a line for every other rank, however many say the same."""
    lines = _render(failures, ranks, hint, fold)
    return lines if _colours() else [_plain(line) for line in lines]


def _render(failures: Sequence[Any], ranks: Sequence[int], hint: str, fold: bool) -> list[str]:
    first = failures[0]
    error = first.error
    by_rank = {f.rank: f.error for f in failures[1:] if f.error is not None}
    same = [first.rank]
    if error.ename == "RankDied":
        cause = f"rank {first.rank} died"
        lines = [f"{BOLD_RED}[rank {first.rank}] {error.evalue}{RESET}"]
    else:
        if fold:  # the same error on many ranks: one traceback, under all their ranks
            same += [r for r, own in by_rank.items() if _same(own, error)]
        cause = f"{rank_label(same)} raised {error.ename}"
        lines = [f"{BOLD_RED}--- {cause} ---{RESET}"]
        body = renumber(error.traceback, notebook_cell()) if error.traceback else ""
        lines += (body or f"{error.ename}: {error.evalue}").rstrip("\n").splitlines()
    others = [r for r in ranks if r in by_rank and r not in same]
    if fold:
        lines += _folded(others, by_rank, error, cause)
    else:
        lines += [f"{RED}[rank {r}]{RESET} {_why(by_rank[r], error, cause)}" for r in others]
    if hint:
        lines.append(hint)
    return lines


def _same(own: Any, first: Any) -> bool:
    return bool(own.ename == first.ename and own.evalue == first.evalue)


def _folded(others: Sequence[int], by_rank: dict[int, Any], first: Any, cause: str) -> list[str]:
    """A line per thing said, with the ranks that say it. Ranks released by the first
    error fold by the kind of their own error: their values differ (a peer's address)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for rank in others:
        own = by_rank[rank]
        released = own.ename not in ("RankDied", first.ename)
        key = ("released", own.ename) if released else ("", _why(own, first, cause))
        groups.setdefault(key, []).append(rank)
    lines = []
    for (how, why), members in groups.items():
        if how == "released":
            own = [by_rank[r] for r in members]
            why = _why(own[0], first, cause)
            if any(not _same(o, own[0]) for o in own[1:]):
                example = _one_line(f"{own[0].ename}: {own[0].evalue}")
                why = f"released after {cause} (rank {members[0]}: {example})"
        lines.append(f"{RED}[{rank_label(members)}]{RESET} {why}")
    return lines


def _why(own: Any, first: Any, cause: str) -> str:
    if own.ename == "RankDied":
        return str(own.evalue)  # already says which rank, where, and what to do
    if _same(own, first):
        return f"raised the same {own.ename}"
    if own.ename == first.ename:  # the same mistake with its own value: its own error
        return f"also raised {_one_line(f'{own.ename}: {own.evalue}')}"
    return f"released after {cause} (here: {_one_line(f'{own.ename}: {own.evalue}')})"
