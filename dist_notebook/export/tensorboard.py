"""A run as TensorBoard event files: one run directory, one sub-run per rank.

Layout, for ``--tensorboard DIR`` and a run named ``digits``::

    DIR/digits-<id>/            text: run/flags, run/code, run/state
    DIR/digits-<id>/rank0/      every metric of rank 0 (loss, ..., system/step_time, ...)
    DIR/digits-<id>/rank1/      the same tags for rank 1

Per-rank sub-runs, not per-rank tags: TensorBoard's scalars view draws one chart per tag
with one line per run, so ``loss`` is one chart with every rank's curve in its own colour,
and the run selector shows or hides a rank (or a whole run) in every chart at once.
Per-rank tags (``loss/rank0``) would give one chart per rank, which cannot show a
straggler or a diverging rank at a glance. The run id in the directory's name keeps two
runs of the same name apart (mixed event files in one directory draw as one tangled line).

A record's user metrics keep their names; the record's own fields are ``system/step_time``,
``system/comm_time`` and ``system/samples``; the x-axis is the record's step.
"""

from __future__ import annotations

import logging
import re
import shlex
from pathlib import Path

from ..protocol import Record
from .base import Location, RunInfo, StepCounter, record_values
from .tfevents import EventFile

log = logging.getLogger("dist_notebook")


def run_dir_name(info: RunInfo) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", info.name).strip("._") or "run"
    return f"{safe}-{info.run_id[:8]}"


def rank_dir_name(rank: int, world_size: int | None) -> str:
    # Zero-padded beyond 10 ranks, so TensorBoard's alphabetical run list is in rank order.
    width = len(str(max((world_size or 1) - 1, rank)))
    return f"rank{rank:0{width}d}"


def flags_markdown(info: RunInfo) -> str:
    rows = "\n".join(f"| {k} | {v or '-'} |" for k, v in info.params().items())
    return f"| flag | value |\n|---|---|\n{rows}"


def code_markdown(code: str) -> str:
    """*code* as a fenced block, the fence longer than any run of backticks inside."""
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", code)), default=0))
    return f"{fence}python\n{code}\n{fence}"


class TensorBoardTarget:
    tool = "tensorboard"

    def __init__(self, info: RunInfo, directory: str | Path, fresh: bool = False) -> None:
        self.info = info
        self.logdir = Path(directory).expanduser().absolute()
        self.run_dir = self.logdir / run_dir_name(info)
        self.fresh = fresh  # an export after the fact: never add to an earlier export
        self._main: EventFile | None = None
        self._ranks: dict[int, EventFile] = {}
        self._step = StepCounter()

    def describe(self) -> str:
        return f"TensorBoard export to {self.logdir}"

    def again(self) -> str:
        return f"load_run({self.info.run_id!r}).to_tensorboard({str(self.logdir)!r})"

    def start(self) -> Location:
        if self.fresh and self.run_dir.exists() and any(self.run_dir.iterdir()):
            raise FileExistsError(
                f"{self.run_dir} already holds an export of run {self.info.name!r}; "
                "remove it, or export to another directory"
            )
        self._main = EventFile(self.run_dir)
        when = self.info.started or None
        self._main.text("run/flags", flags_markdown(self.info), 0, when)
        self._main.text("run/code", code_markdown(self.info.code), 0, when)
        self._main.flush()
        return {
            "tool": self.tool,
            "location": str(self.run_dir),
            "logdir": str(self.logdir),
            "command": f"tensorboard --logdir {shlex.quote(str(self.logdir))}",
            "url": None,
        }

    def _file(self, rank: int) -> EventFile:
        found = self._ranks.get(rank)
        if found is None:
            name = rank_dir_name(rank, self.info.world_size)
            found = self._ranks[rank] = EventFile(self.run_dir / name)
        return found

    def write(self, records: list[Record]) -> None:
        for rec in records:
            self._file(rec.rank).scalars(self._step(rec), rec.time, record_values(rec))

    def flush(self) -> None:
        for f in self._files():
            f.flush()

    def finish(self, state: str, error: str | None) -> None:
        if self._main is not None:
            self._main.text("run/state", state + (f"\n\n    {error}" if error else ""), 0)
        for f in self._files():
            f.close()

    def abort(self) -> None:
        for f in self._files():
            # A full disk fails the close's last write too: those records are lost from
            # the export only (the run store has them), and the warning has been given.
            try:
                f.close()
            except OSError as e:
                log.debug("closing %s after a failed export: %s", f.path, e)

    def _files(self) -> list[EventFile]:
        return ([self._main] if self._main is not None else []) + list(self._ranks.values())
