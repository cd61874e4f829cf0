"""What a cell on the ranks gives back: each rank's output, and the errors it raises.

out = RankOutput(rank=0, stdout="hello")
raise RankError([failed], ranks=[0, 1])   # renders the raising rank's traceback
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ipyparallel.error import RemoteError


@dataclass
class RankOutput:
    rank: int
    stdout: str = ""
    stderr: str = ""
    result: dict[str, Any] | None = None
    displays: list[dict[str, Any]] = field(default_factory=list)
    error: RemoteError | None = None
    completed: float = 0.0
    value: Any = None


class RankError(Exception):
    """A cell raised on one or more ranks; renders the first raising rank's traceback."""

    def __init__(self, failures: list[RankOutput], ranks: list[int]) -> None:
        self.failures = failures
        self.ranks = ranks
        first = failures[0]
        assert first.error is not None
        self.rank = first.rank
        self.ename = first.error.ename
        self.evalue = first.error.evalue
        self.hint = ""
        self.state = ""  # the cluster's state after the cell, set where it is known
        if self.ename == "RankDied":
            super().__init__(self.evalue)
        else:
            super().__init__(f"rank {first.rank} raised {self.ename}: {self.evalue}")

    def add_hint(self, hint: str) -> None:
        """Append what the user can do to the message (and the rendered traceback)."""
        if hint:
            self.hint = hint.lstrip("; ")
            self.args = (f"{self.args[0]}{hint}",)

    def _render_traceback_(self) -> list[str]:
        from .tracebacks import render  # the raising rank's traceback once, as Python's

        if self.state and all(
            f.error and f.error.ename == "KeyboardInterrupt" for f in self.failures
        ):
            # Interrupted (the panel's Interrupt, a stop): one line, no rank's traceback.
            done = [r for r in self.ranks if r not in {f.rank for f in self.failures}]
            return [interrupted_line([f.rank for f in self.failures], done, self.state)]
        return render(self.failures, self.ranks, self.hint)


class RanksInterrupted(KeyboardInterrupt):
    """The kernel's interrupt of a cell on the ranks: shown as one line, no traceback."""

    def __init__(self, interrupted: list[int], finished: list[int], state: str) -> None:
        self.interrupted = interrupted
        self.finished = finished
        super().__init__(interrupted_line(interrupted, finished, state))

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


def interrupted_line(interrupted: list[int], finished: list[int], state: str) -> str:
    """``interrupted ranks 0,1; rank 2 had finished; cluster ready``."""
    from .tracebacks import rank_label

    parts = [f"interrupted {rank_label(interrupted)}"]
    if finished:
        parts.append(f"{rank_label(finished)} had finished")
    parts.append(f"cluster {state}")
    return "; ".join(parts)
