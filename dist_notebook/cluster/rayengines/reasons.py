"""Ray's word on a rank's death, in one line for the rank table and the cell's error."""

from __future__ import annotations

import signal

REASON_LIMIT = 300


def actor_died(error: BaseException) -> str:
    """The reason in a ``RayActorError`` (actor died, its node died, OOM-killed by Ray's
    memory monitor), without Ray's banner and the actor's id/pid lines."""
    text = str(getattr(error, "error_msg", "") or error)
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip()
        and not line.startswith("\t")
        and "died unexpectedly before finishing this task" not in line
    ]
    said = " ".join(lines) or type(error).__name__
    return said if len(said) <= REASON_LIMIT else said[: REASON_LIMIT - 3] + "..."


def engine_exit(code: int | None) -> str:
    """How the engine under a live actor ended: its signal or exit code."""
    if isinstance(code, int) and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
