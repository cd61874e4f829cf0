"""Post-mortem pdb on this rank, driven one command at a time from the kernel.

The kernel's ``%dist_debug`` calls :func:`open_session` once, then :func:`command` for
each line the user types, through ipyparallel apply calls; nothing here reads stdin or
blocks between commands, so the engine stays free for other calls and a lost kernel
leaves no engine stuck at a prompt. The traceback is the one the rank's IPython kept
for its last failed cell (``sys.last_traceback``).

The debugger and its output buffer live in this module between calls (one session per
engine); :func:`close_session` drops them, and with them the frames they held.
"""

from __future__ import annotations

import io
import pdb
import sys
from types import TracebackType
from typing import Any

PROMPT = "(Pdb) "


class _RankPdb(pdb.Pdb):
    """A pdb that writes into a buffer; a command that resumes execution ends it."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()
        super().__init__(stdin=io.StringIO(), stdout=self.buffer, nosigint=True, readrc=False)
        self.prompt = PROMPT
        self.ended = False

    def take(self) -> str:
        text = self.buffer.getvalue()
        self.buffer.seek(0)
        self.buffer.truncate()
        return text


_session: dict[str, Any] = {}


def last_traceback() -> TracebackType | None:
    """The traceback of this rank's last failed cell, or None."""
    return getattr(sys, "last_traceback", None)


def open_session() -> dict[str, Any]:
    """Start pdb on the last traceback; returns {"output", "ended", "error"}."""
    close_session()
    tb = last_traceback()
    if tb is None:
        return {"output": "", "ended": True, "error": "no failed cell"}
    debugger = _RankPdb()
    debugger.reset()
    debugger.setup(None, tb)
    # Post-mortem starts at the frame that raised, as pdb.post_mortem does.
    debugger.print_stack_entry(debugger.stack[debugger.curindex])
    _session["pdb"] = debugger
    exc = getattr(sys, "last_value", None)
    header = f"{type(exc).__name__}: {exc}\n" if exc is not None else ""
    return {"output": header + debugger.take(), "ended": False, "error": ""}


def command(line: str) -> dict[str, Any]:
    """Run one pdb command; returns {"output", "ended", "error"}."""
    debugger: _RankPdb | None = _session.get("pdb")
    if debugger is None:
        return {"output": "", "ended": True, "error": "no debugger session"}
    line = debugger.precmd(line)
    stop = debugger.onecmd(line)
    stop = debugger.postcmd(stop, line)
    output = debugger.take()
    if stop:
        close_session()
    return {"output": output, "ended": bool(stop), "error": ""}


def close_session() -> None:
    """End the session (idempotent): frames are let go, tracing stays off."""
    debugger: _RankPdb | None = _session.pop("pdb", None)
    if debugger is not None:
        debugger.forget()
        sys.settrace(None)
