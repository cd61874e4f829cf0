"""The ranks' output of a run the keeper runs: into the run store, for the kernel.

A kernel follows the run (detached/keptrun.py) and prints what it reads back, labelled
and folded as the output of any run; a run that goes on while no kernel is there keeps
its output in the store, for the kernel that attaches next (and the run's tab in the
panel). One event per piece of output (kind ``stream``): what a rank printed, or a
display it published (its bundle as JSON).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from ..store import StoreWriter
from ..store.recorder import record

STREAM_EVENT = "stream"
# The keeper's run ended: its end message's extra line (RunResult.hint, e.g. "run NAME
# cancelled: the panel's Stop stopped cluster ID; ..."), "" for none; written after the
# run's end state, for the kernel that follows it (detached/keptrun.py).
END_EVENT = "kept_run_end"
MAX_DISPLAY_BYTES = 1 << 20  # a larger display (a big picture) is named, not kept
TAIL_LINES = 20  # each rank's last lines, for the run's tab in the panel (as a kernel's run)


class StoreOutputSink:
    """An OutputSink (cluster/onranks/execute.py) that writes each piece as a ``stream`` event."""

    def __init__(self, writer: StoreWriter | None, run_id: str) -> None:
        self.writer = writer
        self.run_id = run_id
        self._tails: dict[int, deque[str]] = {}

    def __call__(self, rank: int, kind: str, payload: Any) -> None:
        if kind == "display":
            body = json.dumps({"kind": kind, "data": payload.get("data", {})}, default=str)
            if len(body) > MAX_DISPLAY_BYTES:
                body = json.dumps({"kind": "stdout", "text": "(a display too large to keep)\n"})
        else:
            body = json.dumps({"kind": kind, "text": str(payload)})
            tail = self._tails.setdefault(rank, deque(maxlen=TAIL_LINES))
            tail.extend(str(payload).splitlines(keepends=True))
        record(self.writer, "add_event", STREAM_EVENT, body, run_id=self.run_id, rank=rank)

    def close(self) -> None:
        """Every piece was written as it came; each rank's last lines go to the run's
        ``output`` events, as the magic writes them for a kernel's own run."""
        for rank, lines in sorted(self._tails.items()):
            record(
                self.writer, "add_event", "output", "".join(lines), run_id=self.run_id, rank=rank
            )
