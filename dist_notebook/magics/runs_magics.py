"""%dist_runs: the run history, and deleting or pruning it."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ..protocol import RunState
from ..store import StoreError, StoreReader, StoreWriter, store_path
from .args import HELP, help_text, parse
from .output import Table

EXAMPLES = """
  %dist_runs                               every run, newest first
  %dist_runs --state failed                only the failed ones
  %dist_runs --delete digits               delete the runs named digits (or the run with this id)
  %dist_runs --prune-before 2026-11-01     delete ended runs started before that day, and
                                           stopped clusters left without runs
"""


def shown(text: Any) -> str:
    """*text* as it may reach a terminal: a control character of a run's name (an escape
    that clears the screen or recolours it, a newline that fakes a row) is shown escaped,
    as repr() writes it, never sent raw."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def parse_date(text: str) -> float:
    """'2026-11-01' or '2026-11-01T12:00' (local time) as epoch seconds."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"%dist_runs: --prune-before {text!r} is not a date; write it like 2026-11-01"
            " or 2026-11-01T12:00"
        ) from None
    return when.timestamp()


@magics_class
class RunsMagics(Magics):
    @magic_arguments("%dist_runs")
    @HELP
    @argument(
        "--state",
        choices=[s.value for s in RunState],
        help="only runs in this state (default: every state)",
    )
    @argument("--delete", metavar="NAME", help="delete the runs with this name (or this id)")
    @argument(
        "--prune-before",
        metavar="DATE",
        help="delete ended runs started before DATE (YYYY-MM-DD[THH:MM], local time)",
    )
    @help_text(EXAMPLES)
    @line_magic
    def dist_runs(self, line: str) -> None:
        """The runs in the run store, newest first; delete or prune them."""
        args = parse(self.dist_runs, line)
        if args is None:
            return
        if args.delete is not None and args.prune_before is not None:
            raise UsageError("%dist_runs: give --delete or --prune-before, not both")
        if args.delete is not None:
            self._delete(args.delete)
        elif args.prune_before is not None:
            self._prune(parse_date(args.prune_before))
        else:
            self._list(args.state)

    def _list(self, state: str | None) -> None:
        rows = []
        for r in _read(lambda reader: reader.runs(state=state)):
            took = f"{r['ended'] - r['started']:.1f} s" if r["ended"] else "-"
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"]))
            rows.append((shown(r["name"]), shown(r["id"]), shown(r["state"]), when, took))
        if not rows:
            print("no runs yet: run a %%dist_train cell" if state is None else f"no {state} runs")
            return
        display(Table(("name", "id", "state", "started", "took"), rows, "runs"))

    def _delete(self, name: str) -> None:
        runs = _read(lambda reader: reader.runs())
        chosen = [r for r in runs if r["id"] == name] or [r for r in runs if r["name"] == name]
        if not chosen:
            raise UsageError(f"%dist_runs: no run named {name!r}; %dist_runs lists them")
        live = [r for r in chosen if r["state"] in ("pending", "running")]
        if live:
            raise UsageError(
                f"%dist_runs: run {shown(live[0]['name'])} ({live[0]['id']}) is {live[0]['state']}:"
                " stop it first (interrupt the kernel, or Stop in the panel)"
            )
        deleted = _write(lambda writer: writer.delete_runs([r["id"] for r in chosen]))
        print(f"deleted {deleted} run{'s' if deleted != 1 else ''} named {shown(name)}")

    def _prune(self, before: float) -> None:
        runs, clusters = _write(lambda writer: writer.prune(before))
        day = time.strftime("%Y-%m-%d %H:%M", time.localtime(before))
        print(f"deleted {runs} run(s) started before {day} and {clusters} stopped cluster(s)")


def _read(query: Any) -> Any:
    if not store_path().exists():
        return []
    try:
        reader = StoreReader()
        try:
            return query(reader)
        finally:
            reader.close()
    except StoreError as e:
        raise UsageError(str(e)) from None


def _write(change: Any) -> Any:
    try:
        writer = StoreWriter()
        try:
            return change(writer)
        finally:
            writer.close()
    except StoreError as e:
        raise UsageError(str(e)) from None
