"""The live view of a run found in progress at ``%dist_cluster attach``.

The run's keeper has run it since before this kernel: the view is made after one read of
the run store, so its header counts from the run's own start (not the attach), shows steps
done of the run's total and an ETA, and has the records so far. The line under it says
the run is followed, and says how it ended once it has (the view becomes the end's picture
and table then, as a cell's own run does).
"""

from __future__ import annotations

import logging
from typing import Any

from IPython.display import display

from ..store import StoreError

log = logging.getLogger("dist_notebook")


def follow_attached(run: Any) -> None:
    """Show *run* (a KeptRun in progress) and follow it on a thread to its end."""
    from ..detached.keptrun import follow_in_background
    from ..display import Dashboard

    try:
        run.follow_once()  # its start, its steps, its records so far
    except StoreError as e:  # the follow retries; the view starts from what it has
        log.debug("first read of run %s: %s", run.id, e)
    dashboard = Dashboard(run, steps=run.steps, blocking=False)
    dashboard.show()
    label = f"run {run.name} ({run.id})"
    line = display(
        {"text/plain": f"{label} is in progress: following it"}, raw=True, display_id=True
    )

    def ended(result: Any) -> None:
        dashboard.finish(result)
        if line is not None:
            line.update({"text/plain": ended_line(label, result)}, raw=True)

    follow_in_background(run, None, ended)


def ended_line(label: str, result: Any) -> str:
    """The follow line once the run is over: its end state and how long it ran, and the
    keeper's line on its end, if any (a panel Stop: the cluster was stopped)."""
    seconds = max(0.0, result.ended - result.started)
    text = f"{label} ended {result.state.value} after {seconds:.0f} s"
    hint = getattr(result, "hint", "")
    return f"{text}\n{hint}" if hint else text


__all__ = ["ended_line", "follow_attached"]
