"""The live dashboard of a training run, shown in the cell's output.

Updated in place, never with clear_output, and throttled: at most ``MAX_FPS`` redraws a
second, and no more drawing than ``MAX_BUSY`` of one core (a redraw that took 50 ms waits
1 s for the next), because on a small machine the kernel's drawing takes CPU from the
ranks. Redraws run on a timer thread, never on the metrics collector's thread, so a slow
picture never delays the records. When the run ends, the display is updated
once more with a static HTML picture beside the widget view, so a notebook saved
without widget state still shows the final curves and table.
"""

from __future__ import annotations

import base64
import html
import threading
import time
from typing import Any

import ipywidgets as widgets
from IPython.display import display

from ..metrics import RankSummary, RunMetrics
from .plots import RunFigure

MAX_FPS = 8.0  # text (header, per-rank table) updates a second, at most
MAX_BUSY = 0.02  # share of one core the picture's redraws may use
MAX_PICTURE_FPS = 4.0
STALL_AFTER = 5.0  # seconds without a record (at least 10 step times) before "no progress"
TICK = 1.0  # seconds between refreshes of the text (elapsed, ETA, silent ranks)
STATE_COLORS = {
    "pending": "#999",
    "running": "#2ca02c",
    "done": "#1f77b4",
    "failed": "#d62728",
    "dead": "#000",
    "cancelled": "#ff7f0e",
    "stalled": "#e6a100",
}


def _fmt(value: float | None, pattern: str) -> str:
    return pattern.format(value) if value is not None else "-"


class Dashboard:
    """Widgets over a run: header, curves + bars image, per-rank table, Stop button."""

    def __init__(self, run: Any, steps: int | None = None, blocking: bool = False) -> None:
        """*blocking*: the run holds the kernel (a plain cell). The kernel then reads no
        widget messages until the cell ends, so a click could not act in time: the
        button says how to stop instead (the kernel's interrupt, or the side panel)."""
        self.run = run
        self.metrics: RunMetrics = run.metrics
        self.steps = steps
        self.t0 = time.time()
        self.renders = 0
        self._next = 0.0  # monotonic time before which no throttled text update starts
        self._next_picture = 0.0  # and before which the picture is not redrawn
        self._picture_stale = False
        self._dirty = False
        self._rendering = False
        self._finished = False
        self._lock = threading.Lock()
        # Renders come from the throttle's timer thread and the run's thread (show,
        # finish); one matplotlib figure must never be drawn by two of them at once.
        self._draw_lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._figure = RunFigure()
        self.header = widgets.HTML()
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="760px"))
        self.table = widgets.HTML()
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop")
        self.stop_button.on_click(self._on_stop)
        if blocking:
            self.stop_button.disabled = True
            self.stop_button.tooltip = (
                "This cell holds the kernel: stop it with the kernel's interrupt (the notebook's"
                " stop button, or I I), or with Stop in the dist-notebook side panel. Runs"
                " started with --background can be stopped here."
            )
            self.stop_button.description = "Stop: interrupt the kernel"
        self.widget = widgets.VBox(
            [widgets.HBox([self.header, self.stop_button]), self.image, self.table]
        )
        self._handle: Any = None
        self.metrics.subscribe(lambda _records: self.request_render())
        run.on_state(self.request_render)
        self._ticker = threading.Thread(target=self._tick, name="dist-notebook-tick", daemon=True)

    # --- showing ----------------------------------------------------------------
    def show(self) -> None:
        self.render()
        self._handle = display(self._bundle(final=False), raw=True, display_id=True)
        self._ticker.start()

    def _tick(self) -> None:
        """Refresh the text once a second, so a silent (hung) rank shows up without records."""
        while True:
            time.sleep(TICK)
            with self._lock:
                if self._finished:
                    return
            summaries = self.metrics.summaries()
            with self.widget.hold_sync():
                self.header.value = self._header_html(summaries)
                self.table.value = self._table_html(summaries)

    def _bundle(self, final: bool) -> dict[str, Any]:
        bundle: dict[str, Any] = {
            "application/vnd.jupyter.widget-view+json": {
                "version_major": 2,
                "version_minor": 0,
                "model_id": self.widget.model_id,
            },
            "text/plain": self.text_summary(),
        }
        if final:
            bundle["text/html"] = self.static_html()
        return bundle

    def finish(self) -> None:
        """Final redraw; keep the last picture for notebooks saved without widget state."""
        with self._lock:
            self._finished = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        self.render()
        self.stop_button.disabled = True
        if self._handle is not None:
            self._handle.update(self._bundle(final=True), raw=True)

    # --- updating ---------------------------------------------------------------
    def request_render(self) -> None:
        """Called on every batch of records and state change; schedules a throttled redraw."""
        with self._lock:
            self._dirty = True
            if self._timer is None and not self._rendering and not self._finished:
                self._schedule()

    def _schedule(self) -> None:
        # With self._lock held.
        due = self._next_picture if self._picture_stale and not self._dirty else self._next
        wait = max(0.0, due - time.monotonic())
        self._timer = threading.Timer(wait, self._deferred)
        self._timer.daemon = True
        self._timer.start()

    def _deferred(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._timer, self._rendering, self._dirty = None, True, False
        try:
            self.render(picture=time.monotonic() >= self._next_picture)
        finally:
            with self._lock:
                self._rendering = False
                # Records that came during the redraw, or a picture left behind by its
                # CPU budget, get the next one.
                if (self._dirty or self._picture_stale) and not self._finished:
                    self._schedule()

    def render(self, picture: bool = True) -> None:
        """Update the text; redraw the picture too when *picture* (it costs ~50 ms).

        The text follows every batch of records within 1/MAX_FPS s; the picture is
        redrawn as often as MAX_BUSY of one core allows, so the dashboard never takes
        a noticeable share of the CPU from the ranks on a small machine.
        """
        with self._draw_lock:
            start = time.monotonic()
            summaries = self.metrics.summaries()
            png = self._figure.draw(self.metrics, summaries) if picture else None
            with self.widget.hold_sync():
                if png is not None:
                    self.image.value = png
                self.header.value = self._header_html(summaries)
                self.table.value = self._table_html(summaries)
            self.renders += 1
            took = time.monotonic() - start
            self._next = start + 1.0 / MAX_FPS
            if picture:
                self._next_picture = start + max(1.0 / MAX_PICTURE_FPS, took / MAX_BUSY)
            self._picture_stale = not picture

    # --- content ----------------------------------------------------------------
    def rank_state(self, s: RankSummary) -> str:
        """The rank's run state, or "no progress for T s" when a running rank is silent."""
        state = self.run.rank_states.get(s.rank, "pending")
        if state != "running":
            return state
        if getattr(self.run, "rank_finished", lambda r: False)(s.rank):
            return "done"
        silent = time.time() - (s.last_time if s.last_time is not None else self.t0)
        if silent > max(STALL_AFTER, 10 * (s.step_time or 0.0)):
            return f"no progress for {silent:.0f} s"
        return state

    def _header_html(self, summaries: list[RankSummary]) -> str:
        elapsed = time.time() - self.t0
        name, state = html.escape(self.run.name), self.run.state.value
        text = f"<b>{name}</b> &nbsp; {state} &nbsp; {elapsed:.1f} s"
        steps = [s.last_step for s in summaries if s.last_step is not None]
        if steps:
            step = min(steps)
            text += f" &nbsp; step {step}"
            if self.steps:
                text += f"/{self.steps}"
                done = (step + 1) / self.steps
                if 0 < done < 1 and self.run.state.value == "running":
                    text += f" &nbsp; ETA {elapsed * (1 - done) / done:.0f} s"
        return text

    def _table_html(self, summaries: list[RankSummary]) -> str:
        rows = []
        for s in summaries:
            state = self.rank_state(s)
            color = STATE_COLORS.get(state, STATE_COLORS["stalled"])
            style = " style='color:#d62728;font-weight:bold'" if s.straggler else ""
            rows.append(
                f"<tr data-rank='{s.rank}'{style}><td>{s.rank}</td>"
                f"<td><span style='color:{color}'>&#9679;</span> {state}</td>"
                f"<td>{_fmt(s.last_step, '{}')}</td><td>{_fmt(s.last_loss, '{:.4f}')}</td>"
                f"<td>{_fmt(s.samples_per_s, '{:,.0f}')}</td>"
                f"<td>{_fmt(s.step_time and s.step_time * 1000, '{:.1f}')}</td>"
                f"<td>{_fmt(s.comm_share and s.comm_share * 100, '{:.0f}%')}</td>"
                f"<td>{'straggler' if s.straggler else ''}</td></tr>"
            )
        head = (
            "<tr><th>rank</th><th>state</th><th>step</th><th>loss</th><th>samples/s</th>"
            "<th>step ms</th><th>comm</th><th></th></tr>"
        )
        return f"<table class='dist-notebook-ranks'>{head}{''.join(rows)}</table>"

    def text_summary(self) -> str:
        lines = [f"{self.run.name}: {self.run.state.value}"]
        for s in self.metrics.summaries():
            lines.append(
                f"rank {s.rank}: {self.rank_state(s)} step {_fmt(s.last_step, '{}')} "
                f"loss {_fmt(s.last_loss, '{:.4f}')} samples/s {_fmt(s.samples_per_s, '{:,.0f}')}"
            )
        return "\n".join(lines)

    def static_html(self) -> str:
        png = base64.b64encode(self.image.value).decode()
        return (
            f"<div class='dist-notebook-run'><div>{self.header.value}</div>"
            f"<img src='data:image/png;base64,{png}'/>{self.table.value}</div>"
        )

    def _on_stop(self, _button: Any) -> None:
        self.stop_button.disabled = True
        self.stop_button.description = "Stopping"
        self.run.stop()
