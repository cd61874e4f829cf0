"""Static pictures of a run (PNG bytes), drawn with matplotlib's Agg canvas, no pyplot.

One figure is created per dashboard and redrawn in place: its lines, bars and labels
are made once and then only given new data, with fixed margins. Clearing the axes and
re-running the layout on every redraw cost ~300 ms a picture (new ticks, text
measuring), which on a small machine took CPU from the ranks; updating in place costs
a fraction of that. Nothing global is touched, so plots never leak into the notebook's
own matplotlib state.
"""

from __future__ import annotations

import io
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..metrics import RankSummary, RunMetrics

MAX_POINTS = 400  # per line: more points than pixels only costs drawing time
STRAGGLER = "#d62728"
NORMAL = "#1f77b4"


class RunFigure:
    """Loss per rank plus the mean (left); samples/s per rank, stragglers red (right)."""

    def __init__(self) -> None:
        self.figure = Figure(figsize=(9, 3.2), dpi=80)
        FigureCanvasAgg(self.figure)
        self.loss_ax, self.bar_ax = self.figure.subplots(1, 2, width_ratios=(3, 2))
        self.figure.subplots_adjust(left=0.07, right=0.97, bottom=0.15, top=0.9, wspace=0.3)
        self.loss_ax.set_xlabel("step")
        self.loss_ax.set_ylabel("loss")
        self.loss_ax.set_title("loss")
        self.bar_ax.set_title("samples/s")
        self._lines: dict[int, Any] = {}
        self._mean: Any = None
        self._bars: Any = None
        self._labels: list[Any] = []

    def draw(self, metrics: RunMetrics, summaries: list[RankSummary]) -> bytes:
        self._loss(metrics)
        self._throughput(summaries)
        buffer = io.BytesIO()
        # Fast PNG compression: the picture is a few tens of kB either way, and the
        # default level costs more time than the drawing itself.
        self.figure.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})
        return buffer.getvalue()

    def _loss(self, metrics: RunMetrics) -> None:
        ax = self.loss_ax
        for rank in metrics.ranks:
            xs, ys = _thin(*metrics.series(rank, "loss"))
            if xs and rank not in self._lines:
                (self._lines[rank],) = ax.plot(xs, ys, lw=1, alpha=0.7, label=f"rank {rank}")
            elif rank in self._lines:
                self._lines[rank].set_data(xs, ys)
        xs, ys = _thin(*metrics.mean_series("loss"))
        if xs and self._mean is None:
            (self._mean,) = ax.plot(xs, ys, lw=2.2, color="black", label="mean")
        elif self._mean is not None:
            self._mean.set_data(xs, ys)
        if ax.lines:
            if ax.get_legend() is None or len(ax.get_legend().texts) != len(ax.lines):
                ax.legend(loc="upper right", fontsize=7)
            ax.relim()
            ax.autoscale_view()

    def _throughput(self, summaries: list[RankSummary]) -> None:
        ax = self.bar_ax
        if self._bars is None or len(self._bars) != len(summaries):
            ax.clear()
            ax.set_title("samples/s")
            self._bars = ax.barh([f"rank {s.rank}" for s in summaries], [0.0] * len(summaries))
            self._labels = [
                ax.text(0, bar.get_y() + bar.get_height() / 2, "", va="center", fontsize=8)
                for bar in self._bars
            ]
            ax.invert_yaxis()
        values = [s.samples_per_s or 0.0 for s in summaries]
        for bar, label, s, value in zip(self._bars, self._labels, summaries, values, strict=True):
            bar.set_width(value)
            bar.set_color(STRAGGLER if s.straggler else NORMAL)
            label.set_x(value)
            label.set_text(f" {value:,.0f}/s" if s.samples_per_s else " -")
        ax.set_xlim(0, max(values + [1.0]) * 1.35)


def _thin(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """At most MAX_POINTS evenly spaced points, always keeping the latest one."""
    if len(xs) <= MAX_POINTS:
        return xs, ys
    stride = -(-len(xs) // MAX_POINTS)
    keep = list(range(len(xs) - 1, -1, -stride))[::-1]
    return [xs[i] for i in keep], [ys[i] for i in keep]
