"""The static picture of a finished run: a PNG (matplotlib's Agg canvas, no pyplot) and
an HTML table, so a saved notebook shows the run without a kernel or widget state, in
JupyterLab, in nbconvert's HTML and on GitHub.

Drawn once, when the run ends: the live view is the browser's (``live.py``). Colours are
the live chart's (one per rank, everywhere); every measure is the run summary's.
"""

from __future__ import annotations

import base64
import html
import io
import math

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..metrics import RunMetrics
from ..protocol import RankSummary, RunSummary

# The extension's palette (extension/style/chart.css): rank r has colour r % 8.
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
)
STRAGGLER = "#d62728"
MAX_POINTS = 1000  # per line: more points than pixels only costs drawing time


def rank_color(rank: int) -> str:
    return PALETTE[rank % len(PALETTE)]


def main_metric(metrics: RunMetrics) -> str:
    """The metric to draw: loss if any rank reported it, else the first one reported."""
    names: list[str] = []
    for rank in metrics.ranks:
        for rec in metrics.records(rank)[:1]:
            names.extend(k for k in rec.metrics if k not in names)
    return "loss" if "loss" in names or not names else names[0]


def _thin(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    if len(xs) <= MAX_POINTS:
        return xs, ys
    stride = -(-len(xs) // MAX_POINTS)
    keep = list(range(len(xs) - 1, -1, -stride))[::-1]
    return [xs[i] for i in keep], [ys[i] for i in keep]


def _gaps(ys: list[float]) -> list[float]:
    """Non-finite values as NaN: matplotlib leaves a gap there, as the live chart does."""
    return [y if math.isfinite(y) else math.nan for y in ys]


def draw_png(metrics: RunMetrics, summary: RunSummary) -> bytes:
    """Curves per rank plus the mean (left), samples/s per rank (right) as PNG bytes."""
    figure = Figure(figsize=(9, 3.2), dpi=80)
    FigureCanvasAgg(figure)
    curve_ax, bar_ax = figure.subplots(1, 2, width_ratios=(3, 2))
    figure.subplots_adjust(left=0.08, right=0.97, bottom=0.15, top=0.88, wspace=0.3)
    name = main_metric(metrics)
    if name is not None:
        for rank in metrics.ranks:
            xs, ys = _thin(*metrics.series(rank, name))
            if xs:
                curve_ax.plot(xs, _gaps(ys), lw=1, color=rank_color(rank), label=f"rank {rank}")
        xs, ys = _thin(*metrics.mean_series(name))
        if xs and len(metrics.ranks) > 1:
            curve_ax.plot(xs, _gaps(ys), lw=2, ls="--", color="#333", label="mean")
        curve_ax.set_title(name)
        curve_ax.set_xlabel("step")
        if curve_ax.lines:
            curve_ax.legend(fontsize=8, loc="upper right")
    ranks = summary.ranks
    values = [r.samples_per_s or 0.0 for r in ranks]
    finite = [v if math.isfinite(v) else 0.0 for v in values]
    bars = bar_ax.barh([f"rank {r.rank}" for r in ranks], finite)
    for bar, r in zip(bars, ranks, strict=True):
        bar.set_color(rank_color(r.rank))
        if r.straggler:
            bar.set_edgecolor(STRAGGLER)
            bar.set_linewidth(3)
    for y, (v, r) in enumerate(zip(finite, ranks, strict=True)):
        label = f" {v:,.0f}/s" + (" straggler" if r.straggler else "")
        bar_ax.text(v, y, label, va="center", fontsize=8)
    bar_ax.set_xlim(0, max(finite + [1.0]) * 1.5)
    bar_ax.invert_yaxis()
    bar_ax.set_title("samples/s")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", pil_kwargs={"compress_level": 6})
    return buffer.getvalue()


def _fmt(value: float | None, pattern: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return pattern.format(value)


def header_text(name: str, summary: RunSummary, took: float) -> str:
    """'name: succeeded in 7.2 s, step 184/184, 31,432 samples/s'."""
    parts = [f"{name}: {summary.state} in {took:.1f} s"]
    if summary.steps_done is not None:
        parts.append(
            f"step {summary.steps_done}/{summary.steps}"
            if summary.steps
            else f"step {summary.steps_done}"
        )
    if summary.samples_per_s is not None:
        parts.append(f"{_fmt(summary.samples_per_s, '{:,.0f}')} samples/s")
    return ", ".join(parts)


def _row(s: RankSummary, state: str) -> str:
    mark = " style='color:#d62728;font-weight:bold'" if s.straggler else ""
    cells = [
        str(s.rank),
        html.escape(s.host or "-"),
        html.escape(state),
        _fmt(s.steps_done, "{}"),
        _fmt(s.last_loss, "{:.4f}"),
        _fmt(s.samples_per_s, "{:,.0f}"),
        _fmt(s.step_time and s.step_time * 1000, "{:.1f}"),
        _fmt(s.comm_share and s.comm_share * 100, "{:.0f}%"),
        "straggler" if s.straggler else "",
    ]
    return f"<tr data-rank='{s.rank}'{mark}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def final_html(header: str, png: bytes, summary: RunSummary, states: dict[int, str]) -> str:
    """The picture and the per-rank table, as one self-contained HTML block."""
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "rank",
            "host",
            "state",
            "steps",
            "loss",
            "samples/s",
            "step ms",
            "comm",
            "",
        )
    )
    rows = "".join(_row(s, states.get(s.rank, "-")) for s in summary.ranks)
    picture = base64.b64encode(png).decode()
    return (
        f"<div class='dist-notebook-run'><div><b>{html.escape(header)}</b></div>"
        f"<img src='data:image/png;base64,{picture}' alt='{html.escape(header)}'"
        f" style='max-width:100%'/>"
        f"<table class='dist-notebook-ranks'><tr>{head}</tr>{rows}</table></div>"
    )


def text_summary(header: str, summary: RunSummary, states: dict[int, str]) -> str:
    lines = [header]
    for s in summary.ranks:
        lines.append(
            f"rank {s.rank}: {states.get(s.rank, '-')} steps {_fmt(s.steps_done, '{}')} "
            f"loss {_fmt(s.last_loss, '{:.4f}')} samples/s {_fmt(s.samples_per_s, '{:,.0f}')}"
            + (" straggler" if s.straggler else "")
        )
    return "\n".join(lines)
