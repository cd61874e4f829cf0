"""Static pictures of a run (PNG bytes), drawn with matplotlib's Agg canvas, no pyplot.

One figure is created per dashboard and redrawn in place; nothing global is touched,
so plots never leak into the notebook's own matplotlib state.
"""

from __future__ import annotations

import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..metrics import RankSummary, RunMetrics

STRAGGLER = "#d62728"
NORMAL = "#1f77b4"


class RunFigure:
    """Loss per rank plus the mean (left); samples/s per rank, stragglers red (right)."""

    def __init__(self) -> None:
        self.figure = Figure(figsize=(9, 3.2), dpi=80)
        FigureCanvasAgg(self.figure)
        self.loss_ax, self.bar_ax = self.figure.subplots(1, 2, width_ratios=(3, 2))

    def draw(self, metrics: RunMetrics, summaries: list[RankSummary]) -> bytes:
        ax = self.loss_ax
        ax.clear()
        for rank in metrics.ranks:
            xs, ys = metrics.series(rank, "loss")
            if xs:
                ax.plot(xs, ys, lw=1, alpha=0.7, label=f"rank {rank}")
        xs, ys = metrics.mean_series("loss")
        if xs:
            ax.plot(xs, ys, lw=2.2, color="black", label="mean")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_title("loss")
        if ax.lines:
            ax.legend(loc="upper right", fontsize=7)
        self._bars(summaries)
        self.figure.tight_layout()
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png")
        return buffer.getvalue()

    def _bars(self, summaries: list[RankSummary]) -> None:
        ax = self.bar_ax
        ax.clear()
        labels = [f"rank {s.rank}" for s in summaries]
        values = [s.samples_per_s or 0.0 for s in summaries]
        colors = [STRAGGLER if s.straggler else NORMAL for s in summaries]
        bars = ax.barh(labels, values, color=colors)
        for bar, s in zip(bars, summaries, strict=True):
            text = f"{s.samples_per_s:,.0f}/s" if s.samples_per_s else "-"
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {text}",
                    va="center", fontsize=8)
        ax.set_title("samples/s")
        ax.invert_yaxis()
        ax.margins(x=0.3)
