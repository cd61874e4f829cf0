"""The live view where no widget front end draws the chart: terminal IPython, `jupyter
console`, `nbconvert --execute`, a VS Code that cannot load anywidget.

A kernel cannot ask its front end whether it renders widgets, but a front end that does
makes the widget's model, and the model says hello (``live.py``). So while no hello has
come, ``GRACE`` s after the output was shown, the same output (by its display id) is
updated with the run's progress as text, at most once every ``EVERY`` s: step/total,
samples/s, ETA, and the main metric per rank (min/median/max beyond ``PER_RANK`` ranks).
The update keeps the widget's view in the bundle, so a front end whose hello was only
late still draws the chart; once a hello has come, nothing more is sent here. Without a
kernel at all (terminal IPython) the line is written to the terminal in place (``\\r``),
or, when stdout is not a terminal, one line every ``PIPE_EVERY`` s. The end's picture and
table replace it as they replace the chart (``dashboard.Dashboard.finish``).
"""

from __future__ import annotations

import html
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from ..metrics import RunMetrics
from ..protocol import RunSummary
from .final import main_metric

EVERY = 1.0  # seconds between updates: the most a text output should change
GRACE = 2.0  # seconds a widget front end gets to make its model before text is sent
PER_RANK = 8  # ranks listed one by one; beyond, min/median/max
PIPE_EVERY = 10.0  # seconds between lines when the terminal is a pipe or a file


def _num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def progress_lines(
    name: str,
    summary: RunSummary,
    metrics: RunMetrics,
    started: float,
    now: float | None = None,
) -> list[str]:
    """The run's progress as text: a header line, the main metric by rank, the verdict."""
    now = time.time() if now is None else now
    elapsed = max(0.0, now - started)
    parts = [f"{name}: {summary.state}", f"{elapsed:.0f} s"]
    done, steps = summary.steps_done, summary.steps
    if done is not None:
        parts.append(f"step {done}/{steps}" if steps else f"step {done}")
        if steps and 0 < done < steps and summary.state == "running":
            parts.append(f"ETA {elapsed * (steps - done) / done:.0f} s")
    if summary.samples_per_s is not None:
        parts.append(f"{summary.samples_per_s:,.0f} samples/s")
    lines = [" · ".join(parts)]
    metric = main_metric(metrics)
    last: dict[int, float] = {}
    for rank in metrics.ranks:
        records = metrics.records(rank)
        if records and metric in records[-1].metrics:
            last[rank] = records[-1].metrics[metric]
    if not last:
        lines.append("no values reported yet")
    elif len(metrics.ranks) <= PER_RANK:
        lines.append(
            f"{metric}: " + " · ".join(f"rank {r} {_num(v)}" for r, v in sorted(last.items()))
        )
    else:
        values = sorted(last.values())
        lines.append(
            f"{metric} over {len(values)} ranks: min {_num(values[0])} · "
            f"median {_num(statistics.median(values))} · max {_num(values[-1])}"
        )
    if summary.verdict:
        lines.append(f"verdict: {summary.verdict}")
    return lines


class TextLive:
    """Sends the run's progress as text to the live output while no widget drew it.

    *lines* gives the text; *drawn* says whether a widget front end made the model;
    *handle* is the output's DisplayHandle (None: no kernel, write to *out*).
    """

    def __init__(
        self,
        lines: Callable[[], list[str]],
        drawn: Callable[[], bool],
        handle: Any,
        widget_view: dict[str, Any] | None,
        every: float = EVERY,
        grace: float = GRACE,
        out: TextIO | None = None,
    ) -> None:
        self.lines = lines
        self.drawn = drawn
        self.handle = handle
        self.widget_view = widget_view
        self.every = every
        self.grace = grace
        self.out = out if out is not None else sys.stdout
        self.updates = 0
        self._shown = time.monotonic()
        self._last_line = 0.0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dist-notebook-text", daemon=True)

    def start(self) -> None:
        self._shown = time.monotonic()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self.every):
            if self.drawn():
                return  # a widget front end draws the chart: nothing more to send
            if time.monotonic() - self._shown >= self.grace:
                self.update()

    def update(self) -> None:
        lines = self.lines()
        if not lines:
            return
        if self.handle is None:
            self._write(lines)
            return
        bundle: dict[str, Any] = {
            "text/plain": "\n".join(lines),
            "text/html": "<pre class='dist-notebook-live-text'>"
            + html.escape("\n".join(lines))
            + "</pre>",
        }
        if self.widget_view is not None:
            bundle["application/vnd.jupyter.widget-view+json"] = self.widget_view
        self.handle.update(bundle, raw=True)
        self.updates += 1

    def _write(self, lines: list[str]) -> None:
        text = " | ".join(lines)
        if self.out.isatty():
            self.out.write("\r\x1b[K" + text)
        elif time.monotonic() - self._last_line >= PIPE_EVERY or not self.updates:
            self.out.write(text + "\n")
            self._last_line = time.monotonic()
        else:
            return
        self.out.flush()
        self.updates += 1

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.handle is None and self.updates and self.out.isatty():
            self.out.write("\n")  # the end's summary starts on a line of its own
            self.out.flush()
