"""The output of a %%dist_train cell: the live view while the run goes, a static picture
and table when it ends.

While the run goes, the output is one widget view (``live.LiveRunWidget``) drawn by the
browser from new records only; the kernel draws no picture. When the run ends, the same
output (by its display id) becomes a PNG plus an HTML table, and the widget is closed:
a saved notebook then shows the run without a kernel and without widget state, in
JupyterLab, nbconvert's HTML and on GitHub, and never "model not found".

Stop: in a background run the kernel is idle and handles the click itself. In a plain
(blocking) cell the widget's messages are routed to a kernel subshell of their own
(``uipoll.CommRoute``), handled there while the main thread waits on the ranks.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from IPython.display import display

from ..protocol import RunSummary
from .final import draw_png, final_html, header_text, text_summary
from .live import LiveFeed, LiveRunWidget
from .uipoll import CommRoute


class Dashboard:
    """The live view of one TrainingRun, then its static picture."""

    def __init__(self, run: Any, steps: int | None = None, blocking: bool = False) -> None:
        self.run = run
        self.steps = steps
        self.blocking = blocking
        self.widget = LiveRunWidget(
            name=run.name,
            run_id=run.id,
            state=run.state.value,
            steps=steps,
            started=run.started,
            rank_states=self._rank_states(),
        )
        # A blocking cell holds the main shell: the widget's messages go to a subshell.
        self.route = CommRoute(self.widget.comm) if blocking else None
        # Where they cannot, the kernel's interrupt stops the run (the button is hidden).
        self.widget.stoppable = self.route is None or self.route.available
        self.feed = LiveFeed(self.widget, run.metrics, self.summary)
        self.widget.on_msg(self._on_msg)
        self.stop_requested = False
        self.final_bundle: dict[str, Any] | None = None
        self._handle: Any = None
        self._finished = False
        run.on_state(self._on_state)

    # --- the run's facts ----------------------------------------------------------
    def summary(self) -> RunSummary:
        return self.run.metrics.run_summary(self.run.id, self.run.state.value, self.steps)

    def _rank_states(self) -> dict[str, str]:
        return {str(r): s for r, s in self.run.rank_states.items()}

    # --- showing ------------------------------------------------------------------
    def show(self) -> None:
        bundle = {
            "application/vnd.jupyter.widget-view+json": {
                "version_major": 2,
                "version_minor": 0,
                "model_id": self.widget.model_id,
            },
            "text/plain": f"{self.run.name}: {self.run.state.value} (live view)",
        }
        self._handle = display(bundle, raw=True, display_id=True)
        self.feed.start()

    def _on_state(self) -> None:
        if self._finished:
            return
        with self.widget.hold_sync():
            self.widget.state = self.run.state.value
            self.widget.rank_states = self._rank_states()
        self.feed.touch()

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        kind = content.get("kind") if isinstance(content, dict) else None
        if kind == "stop" and not self.stop_requested and not self._finished:
            self.stop_requested = True
            self.run.stop()
        elif kind == "hello" and not self._finished:
            self.feed.history()

    def finish(self, result: Any = None) -> None:
        """Replace the live view by the final picture and table; close the widget."""
        if self._finished:
            return
        self._finished = True
        self.feed.stop()
        summary = self.summary()
        started = result.started if result is not None else self.run.started
        ended = result.ended if result is not None else time.time()
        header = header_text(self.run.name, summary, ended - started)
        states = dict(self.run.rank_states)
        png = draw_png(self.run.metrics, summary)
        self.final_bundle = {
            "image/png": base64.b64encode(png).decode(),
            "text/html": final_html(header, png, summary, states),
            "text/plain": text_summary(header, summary, states),
        }
        if self._handle is not None:
            self._handle.update(self.final_bundle, raw=True)
        self.widget.close()
        if self.route is not None:
            self.route.close()

    def cost(self) -> float:
        """CPU seconds the live view has cost the kernel so far."""
        return self.feed.cpu
