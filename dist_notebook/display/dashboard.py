"""The output of a %%dist_train cell: the live view while the run goes, a static picture
and table when it ends.

While the run goes, the output is one widget view (``live.LiveRunWidget``, an anywidget)
drawn by the browser from new records only; the kernel draws no picture. The same output
carries a text/html and text/plain note naming the run and ``load_run(...)``: what a
reader without widgets (nbconvert, GitHub, an untrusted copy) sees of a file saved
mid-run. When the run ends, the same output (by its display id) becomes a PNG plus an
HTML table; the widget's ``final`` trait gets that picture too, for views the display
update cannot reach (a page reloaded mid-run holds the output from the file, without its
display id; a page reloaded while a plain cell blocks makes its model only once the cell
has ended, so the widget stays open for it, costing the kernel one idle model per run).
It is closed at once only where no front end ever made a model of it. The saved notebook
of a page that saw the end shows the run without a kernel and without widget state, in
JupyterLab, nbconvert's HTML and on GitHub.

Where no widget front end exists (terminal IPython, ``jupyter console``, ``nbconvert
--execute``), ``textlive.TextLive`` shows the run as text updated in place instead.

Stop: in a background run the kernel is idle and handles the click itself. In a plain
(blocking) cell the widget's messages are routed to a kernel subshell of their own
(``uipoll.CommRoute``), handled there while the main thread waits on the ranks.
"""

from __future__ import annotations

import base64
import html
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

from IPython.display import display

from ..cluster.onranks.transfer import warming
from ..contracts import view_message_kind
from ..protocol import RunSummary
from .final import final_html, header_text, last_values, pictures, text_summary
from .live import LiveFeed, LiveRunWidget
from .textlive import TextLive, progress_lines
from .uipoll import CommRoute

log = logging.getLogger("dist_notebook")

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# The kernel imports torch in a background thread from %dist_cluster start on (the first
# %dist_pull of tensors needs it: the cluster transfer module's warm_up). Loading libtorch
# holds the GIL for 0.4 s and more at a time, so a run started meanwhile (a notebook run
# from the top) had its records wait in the collector's socket: bench/live_view.py measured
# report() -> collector p95 of 440 ms in the run's first tenth against ~50 ms after, with
# that thread using 0.8 s of CPU in the run's first 4 s. A run with a live view waits for
# it (at most WARM_WAIT s, the view shown meanwhile) before its cell goes to the ranks.
WARM_WAIT = 20.0


def wait_for_warm_up(timeout: float = WARM_WAIT) -> float:
    """Wait for the kernel's torch import (transfer.warming) to end; the seconds waited."""
    t0 = time.monotonic()
    thread = warming()
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)
    return time.monotonic() - t0


def kernel_id() -> str:
    """The id a Jupyter server knows this kernel by (its connection file is
    ``kernel-<id>.json``), or "" outside a kernel: a front end that opens a saved live
    view under another kernel knows at once that the view's model cannot be there."""
    # Only where a kernel runs (it imported this module): importing ipykernel's app
    # elsewhere would make its comm manager the process's (comm's global hooks), under
    # the widgets of a plain IPython shell.
    app = sys.modules.get("ipykernel.kernelapp")
    if app is None or not app.IPKernelApp.initialized():
        return ""
    stem = Path(app.IPKernelApp.instance().connection_file).stem
    return stem.removeprefix("kernel-")


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
        self.hellos = 0  # models made in front ends: more than one is a late view
        # Seconds the run waited for the kernel's torch import (None: not running yet).
        self.warm_waited: float | None = None
        self.final_bundle: dict[str, Any] | None = None
        self._handle: Any = None
        self.text: TextLive | None = None
        self._finished = False
        run.on_state(self._on_state)

    # --- the run's facts ----------------------------------------------------------
    def summary(self) -> RunSummary:
        return self.run.metrics.run_summary(self.run.id, self.run.state.value, self.steps)

    def _rank_states(self) -> dict[str, str]:
        return {str(r): s for r, s in self.run.rank_states.items()}

    # --- showing ------------------------------------------------------------------
    def note(self) -> tuple[str, str]:
        """What the live output says without widgets: (text/plain, text/html)."""
        name, run_id = self.run.name, self.run.id
        text = (
            f"run {name} ({run_id}): live view of a run in progress; "
            f"see dist_notebook.load_run({name!r}) for its records"
        )
        markup = (
            f"<div class='dist-notebook-live-note' data-run='{html.escape(run_id)}'"
            f" data-kernel='{html.escape(kernel_id())}'>"
            f"<b>run {html.escape(name)}</b> ({html.escape(run_id)}): live view of a run in "
            f"progress; see <code>dist_notebook.load_run({html.escape(repr(name))})</code>"
            " for its records and picture</div>"
        )
        return text, markup

    def show(self) -> None:
        text, markup = self.note()
        view = {"version_major": 2, "version_minor": 0, "model_id": self.widget.model_id}
        bundle = {WIDGET_MIME: view, "text/plain": text, "text/html": markup}
        self._handle = display(bundle, raw=True, display_id=True)
        self.feed.start()
        # Where no front end draws widgets: the progress as text, in the same output.
        from IPython import get_ipython

        in_kernel = getattr(get_ipython(), "kernel", None) is not None
        self.text = TextLive(
            self._progress,
            lambda: self.hellos > 0,
            self._handle if in_kernel else None,
            view,
        )
        self.text.start()

    def _progress(self) -> list[str]:
        if self.run.state.value not in ("pending", "running"):
            return []  # the end's picture says the rest
        return progress_lines(self.run.name, self.summary(), self.run.metrics, self.run.started)

    def _on_state(self) -> None:
        if self._finished:
            return
        with self.widget.hold_sync():
            self.widget.state = self.run.state.value
            self.widget.rank_states = self._rank_states()
        self.feed.touch()
        if self.run.state.value == "running" and self.warm_waited is None:
            # In the run's own thread, its channel open and its cell not yet sent to the
            # ranks (a background run leaves the kernel's main thread free meanwhile).
            self.warm_waited = wait_for_warm_up()

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        kind = view_message_kind(content)  # contracts.ViewMessage
        if kind == "stop" and not self.stop_requested and not self._finished:
            self.stop_requested = True
            self.run.stop()
        elif kind == "hello":
            self.hellos += 1
            if not self._finished:
                self.feed.history()

    def finish(self, result: Any = None) -> None:
        """Replace the live view by the final picture and table; close the widget."""
        if self._finished:
            return
        self._finished = True
        self.feed.stop()
        if self.text is not None:
            self.text.stop()
        summary = self.summary()
        started = result.started if result is not None else self.run.started
        ended = result.ended if result is not None else time.time()
        header = header_text(self.run.name, summary, ended - started)
        states = dict(self.run.rank_states)
        png, dark = pictures(self.run.metrics, summary)
        values = last_values(self.run.metrics)
        self.final_bundle = {
            "image/png": base64.b64encode(png).decode(),
            "text/html": final_html(header, png, summary, states, values, dark_png=dark),
            "text/plain": text_summary(header, summary, states, values),
        }
        self.widget.final = self.final_bundle["text/html"]
        if self._handle is not None:
            self._handle.update(self.final_bundle, raw=True)
        if self.hellos == 0:
            # No front end ever made a model of it (a terminal, nbconvert): nothing to show.
            try:
                self.widget.close()
            except KeyError as e:
                # Its comm's manager is no longer the one that registered it (a kernel's
                # took over the process's): the comm is gone already; the run's end stands.
                log.debug("live view %s: comm already gone (%s)", self.run.id, e)
        if self.route is not None:
            self.route.close()

    def cost(self) -> float:
        """CPU seconds the live view has cost the kernel so far."""
        return self.feed.cpu
