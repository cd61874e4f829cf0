"""The static picture of a finished run: a PNG (matplotlib's Agg canvas, no pyplot) and
an HTML table, so a saved notebook shows the run without a kernel or widget state, in
JupyterLab, in nbconvert's HTML and on GitHub.

Drawn once, when the run ends: the live view is the browser's (``live.py``). Colours are
the live chart's (one per rank, everywhere); every measure is the run summary's. Every
metric the run reported has a panel (the main one, loss if reported, first) and a column.
The PNG is transparent with grey text and axes, which read on any page; a dark theme
shows its twin in light ink instead (``pictures``, ``final_html``); a run without values
says so instead of drawing empty axes. Beyond BANDED_BEYOND ranks the curves are banded
as the live chart's (band.py: median, min-max band, the ranks that deviate most and the
stragglers named), the bars keep the slowest ranks, and a ranks x steps heatmap of step
time (minus comm time where reported) shows a slow rank as a line.
"""

from __future__ import annotations

import base64
import html
import io
import math

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..metrics import RunMetrics
from ..protocol import RankSummary, RunSummary
from .band import BANDED_BEYOND, HEAT_SERIES, band_of, heat_of, heat_rgba, hottest, most_deviating

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
INK = "#808080"  # text, axes and the mean: readable on white and on a dark page
# The same picture for a dark theme: light ink (on JupyterLab Dark's #111 a contrast of 12,
# where the grey's thin small glyphs read dark grey). The HTML carries it beside the grey
# one and a dark theme shows it (extension/style/chart.css, final_html).
DARK_INK = "#d0d0d0"
MAX_POINTS = 1000  # per line: more points than pixels only costs drawing time
MAX_PANELS = 6  # metric panels in the picture; the table has every metric
SLOWEST_BARS = 8  # bars beyond BANDED_BEYOND ranks: the slowest ranks and the stragglers
# The heatmap's median cell: a translucent grey, pale on a white page and dark on
# JupyterLab Dark (the PNG is transparent), as the live heatmap's follows the theme.
HEAT_BASE = (0.5, 0.5, 0.5, 0.14)
HEAT_COLUMNS = 240  # buckets of steps at most (about 2 px each at the picture's width)


def rank_color(rank: int) -> str:
    return PALETTE[rank % len(PALETTE)]


def metric_names(metrics: RunMetrics) -> list[str]:
    """Every metric a rank reported, in the order they first came; loss first."""
    names: dict[str, None] = {}
    for rank in metrics.ranks:
        for rec in metrics.records(rank):
            for key in rec.metrics:
                names.setdefault(key, None)
    ordered = list(names)
    if "loss" in names:
        ordered.remove("loss")
        ordered.insert(0, "loss")
    return ordered


def main_metric(metrics: RunMetrics) -> str:
    """The metric to draw: loss if any rank reported it, else the first one reported."""
    names = metric_names(metrics)
    return names[0] if names else "loss"


def last_values(metrics: RunMetrics) -> dict[int, dict[str, float]]:
    """Each rank's last reported value of each metric."""
    out: dict[int, dict[str, float]] = {}
    for rank in metrics.ranks:
        values: dict[str, float] = {}
        for rec in metrics.records(rank):
            values.update(rec.metrics)
        out[rank] = values
    return out


def _thin(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    if len(xs) <= MAX_POINTS:
        return xs, ys
    stride = -(-len(xs) // MAX_POINTS)
    keep = list(range(len(xs) - 1, -1, -stride))[::-1]
    return [xs[i] for i in keep], [ys[i] for i in keep]


def _gaps(ys: list[float]) -> list[float]:
    """Non-finite values as NaN: matplotlib leaves a gap there, as the live chart does."""
    return [y if math.isfinite(y) else math.nan for y in ys]


def _style(ax: Axes, ink: str) -> None:
    ax.set_facecolor("none")
    ax.tick_params(colors=ink, labelsize=8)
    for spine in ax.spines.values():
        spine.set_color(ink)
    ax.title.set_color(ink)
    ax.xaxis.label.set_color(ink)


def _nothing(ax: Axes, what: str, ink: str) -> None:
    """An empty panel that says what is missing (no 0..1 axes standing for nothing)."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, what, ha="center", va="center", color=ink, transform=ax.transAxes)


def _legend(ax: Axes, ink: str) -> None:
    key = ax.legend(fontsize=7, loc="best", framealpha=0, edgecolor=ink)
    for text in key.get_texts():
        text.set_color(ink)


def _banded(
    ax: Axes,
    series: dict[int, tuple[list[float], list[float]]],
    stragglers: set[int],
    ink: str,
) -> None:
    """The median and min-max band of every rank, and the ranks the band names."""
    band = band_of(series, MAX_POINTS // 2)
    ax.fill_between(band.x, band.lo, band.hi, color=PALETTE[0], alpha=0.25, lw=0, label="min-max")
    ax.plot(band.x, band.mid, lw=2, color=ink, label=f"median of {len(series)} ranks")
    named = {r: "deviates most" for r in most_deviating(band.deviation)}
    named.update({r: "straggler" for r in stragglers if r in series})
    for rank in sorted(named):
        xs, ys = _thin(*series[rank])
        slow = named[rank] == "straggler"
        color = STRAGGLER if slow else rank_color(rank)
        label = f"rank {rank} ({named[rank]})"
        ax.plot(xs, _gaps(ys), lw=2 if slow else 1, color=color, label=label)


def _curves(
    ax: Axes,
    metrics: RunMetrics,
    name: str,
    legend: bool,
    stragglers: frozenset[int] | set[int] = frozenset(),
    ink: str = INK,
) -> None:
    series = {r: metrics.series(r, name) for r in metrics.ranks}
    series = {r: s for r, s in series.items() if any(math.isfinite(y) for y in s[1])}
    if len(series) > BANDED_BEYOND:
        _banded(ax, series, set(stragglers), ink)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        if legend:
            _legend(ax, ink)
        return
    drawn = False
    for rank in metrics.ranks:
        xs, ys = _thin(*metrics.series(rank, name))
        if any(math.isfinite(y) for y in ys):
            ax.plot(xs, _gaps(ys), lw=1, color=rank_color(rank), label=f"rank {rank}")
            drawn = True
    xs, ys = _thin(*metrics.mean_series(name))
    if drawn and xs and len(metrics.ranks) > 1:
        ax.plot(xs, _gaps(ys), lw=2, ls="--", color=ink, label="mean")
    ax.set_title(name, fontsize=10)
    if not drawn:
        _nothing(ax, f"no values of {name}", ink)
        return
    ax.set_xlabel("step", fontsize=8)
    if legend:
        _legend(ax, ink)


def _bars(ax: Axes, summary: RunSummary, ink: str = INK) -> None:
    ranks = summary.ranks
    title = "samples/s"
    if len(ranks) > BANDED_BEYOND:
        # The slowest few and the stragglers: 64 bars would be unreadable.
        rate = {
            r.rank: r.samples_per_s
            for r in ranks
            if r.samples_per_s is not None and math.isfinite(r.samples_per_s)
        }
        slowest = set(sorted(rate, key=lambda rank: (rate[rank], rank))[:SLOWEST_BARS])
        title = f"samples/s: the slowest {len(slowest)} of {len(ranks)} ranks"
        ranks = [r for r in ranks if r.rank in slowest or r.straggler]
    ax.set_title(title, fontsize=10)
    values = [r.samples_per_s for r in ranks]
    finite = [v if v is not None and math.isfinite(v) else 0.0 for v in values]
    if not any(finite):
        _nothing(ax, "no samples reported", ink)
        return
    bars = ax.barh([f"rank {r.rank}" for r in ranks], finite)
    for bar, r in zip(bars, ranks, strict=True):
        bar.set_color(rank_color(r.rank))
        if r.straggler:
            bar.set_edgecolor(STRAGGLER)
            bar.set_linewidth(3)
    for y, (v, r) in enumerate(zip(finite, ranks, strict=True)):
        label = f" {v:,.0f}/s" + (" straggler" if r.straggler else "")
        ax.text(v, y, label, va="center", fontsize=8, color=ink)
    ax.set_xlim(0, max(finite) * 1.5)
    ax.invert_yaxis()


def _heatmap(ax: Axes, metrics: RunMetrics, stragglers: set[int], ink: str = INK) -> list[int]:
    """The ranks x steps heatmap of step time (minus comm time where reported), the live
    view's beyond BANDED_BEYOND ranks: a slow rank is a red line, one that waits for it
    a blue one. Returns the rows of stragglers, whose labels are red."""
    heat = heat_of({r: metrics.records(r) for r in metrics.ranks}, HEAT_COLUMNS)
    if heat is None:
        ax.set_title("per rank: step time", fontsize=10)
        _nothing(ax, "no step times reported", ink)
        return []
    image = [[heat_rgba(v, heat.median, HEAT_BASE) for v in row] for row in heat.rows]
    n = len(heat.ranks)
    ax.imshow(
        image, aspect="auto", interpolation="nearest", extent=(heat.lo, heat.hi, n - 0.5, -0.5)
    )
    hot = hottest(heat)
    every = 1 if n <= 16 else 8
    shown = sorted(
        {i for i in range(0, n, every)}
        | {i for i, r in enumerate(heat.ranks) if r in stragglers or r == hot}
    )
    ax.set_yticks(shown, [f"rank {heat.ranks[i]}" for i in shown])
    ax.set_title(
        f"per rank: {HEAT_SERIES[heat.key]} · median {heat.median:.3g} s"
        " · red: slower, blue: faster (×2 full)",
        fontsize=10,
    )
    ax.set_xlabel("step", fontsize=8)
    return [k for k, i in enumerate(shown) if heat.ranks[i] in stragglers]


def draw_png(metrics: RunMetrics, summary: RunSummary, ink: str = INK) -> bytes:
    """The run's picture (``draw``) as PNG bytes, transparent."""
    buffer = io.BytesIO()
    draw(metrics, summary, ink).savefig(
        buffer, format="png", transparent=True, pil_kwargs={"compress_level": 6}
    )
    return buffer.getvalue()


def pictures(metrics: RunMetrics, summary: RunSummary) -> tuple[bytes, bytes]:
    """The run's picture as PNG in INK (any page) and in DARK_INK (a dark theme's)."""
    return draw_png(metrics, summary), draw_png(metrics, summary, DARK_INK)


def draw(metrics: RunMetrics, summary: RunSummary, ink: str = INK) -> Figure:
    """Every metric's curves per rank plus the mean, and samples/s per rank, with text,
    axes and the mean in *ink* (INK, or DARK_INK for a dark theme).

    The main metric and the bars share the first row; the other metrics follow, two to a
    row (up to MAX_PANELS panels)."""
    names = metric_names(metrics)
    shown, rest = (names or ["loss"])[:MAX_PANELS], names[MAX_PANELS:]
    extra_rows = -(-(len(shown) - 1) // 2)
    heat = len(metrics.ranks) > BANDED_BEYOND  # the ranks x steps heatmap, full width
    height = 3.2 + 2.4 * extra_rows + (2.6 if heat else 0.0)
    figure = Figure(figsize=(9, height), dpi=80)
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(1 + extra_rows + heat, 2, width_ratios=(3, 2))
    first = figure.add_subplot(grid[0, 0])
    slow = {r.rank for r in summary.ranks if r.straggler}
    if names:
        _curves(first, metrics, shown[0], legend=True, stragglers=slow, ink=ink)
    else:
        _nothing(first, "no values were reported", ink)
    _bars(figure.add_subplot(grid[0, 1]), summary, ink)
    for i, name in enumerate(shown[1:]):
        ax = figure.add_subplot(grid[1 + i // 2, i % 2])
        _curves(ax, metrics, name, legend=False, stragglers=slow, ink=ink)
    red: list[int] = []
    if heat:
        heat_ax = figure.add_subplot(grid[-1, :])
        red = _heatmap(heat_ax, metrics, slow, ink)
    for ax in figure.axes:
        _style(ax, ink)
    for k in red:  # after the grey of _style
        heat_ax.get_yticklabels()[k].set_color(STRAGGLER)
    if rest:
        figure.text(0.99, 0.01, f"+{len(rest)} more in the table", ha="right", color=ink)
    figure.tight_layout()
    return figure


def _fmt(value: float | None, pattern: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return pattern.format(value)


def verdict_line(summary: RunSummary) -> str:
    """'verdict: rank 1 is starved: ...' (dist_notebook/verdict.py), or '' before one."""
    return f"verdict: {summary.verdict}" if summary.verdict else ""


def memory(nbytes: float) -> str:
    """Bytes as "812 MB" or "1.4 GB" (powers of 1000)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{nbytes:.0f} B"


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


Values = dict[int, dict[str, float]]  # rank -> metric -> its last value (last_values)


def _columns(summary: RunSummary, values: Values | None) -> list[str]:
    """The metric columns: every metric reported (loss alone without *values*)."""
    if values is None:
        return ["loss"]
    names: dict[str, None] = {}
    for r in summary.ranks:
        for key in values.get(r.rank, {}):
            names.setdefault(key, None)
    ordered = list(names)
    if "loss" in names:
        ordered.remove("loss")
        ordered.insert(0, "loss")
    return ordered


def _value(s: RankSummary, name: str, values: Values | None) -> float | None:
    if values is None:
        return s.last_loss if name == "loss" else None
    return values.get(s.rank, {}).get(name)


def _row(s: RankSummary, state: str, columns: list[str], values: Values | None) -> str:
    mark = " style='color:#d62728;font-weight:bold'" if s.straggler else ""
    cells = [
        str(s.rank),
        html.escape(s.host or "-"),
        html.escape(state),
        _fmt(s.steps_done, "{}"),
        *(_fmt(_value(s, name, values), "{:.4g}") for name in columns),
        _fmt(s.samples_per_s, "{:,.0f}"),
        _fmt(s.step_time and s.step_time * 1000, "{:.1f}"),
        _fmt(s.comm_share and s.comm_share * 100, "{:.0f}%"),
        _fmt(None if s.others_wait is None else s.others_wait * 1000, "{:.1f}"),
        "-" if s.peak_mem is None else memory(s.peak_mem),
        "straggler" if s.straggler else ("starved" if s.starved else ""),
    ]
    return f"<tr data-rank='{s.rank}'{mark}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


# Under the table when a rank's "others wait" is negative (it reads as a mistake otherwise).
OTHERS_WAIT_NOTE = (
    "others wait ms: per step (median), how long the other ranks wait for this one (its"
    " time outside the all-reduce less theirs); below 0, it arrives first and waits for them"
)


def final_html(
    header: str,
    png: bytes,
    summary: RunSummary,
    states: dict[int, str],
    values: Values | None = None,
    dark_png: bytes | None = None,
) -> str:
    """The picture and the per-rank table (a column per metric), as one HTML block.

    With *dark_png* (the picture in DARK_INK) the image carries it as a CSS variable,
    ``--dn-dark-picture``, which a dark theme shows in its place (``content``:
    extension/style/chart.css, in the labextension and the live view's bundle); elsewhere,
    and where a sanitizer drops the variable, the grey picture shows."""
    columns = _columns(summary, values)
    # "others wait": how long, per step, the other ranks wait for this one (the straggler's
    # measure, protocol.mark_stragglers; negative: it waits for them).
    titles = [
        *("rank", "host", "state", "steps", *columns),
        *("samples/s", "step ms", "comm", "others wait ms", "peak mem", ""),
    ]
    head = "".join(f"<th>{html.escape(t)}</th>" for t in titles)
    rows = "".join(_row(s, states.get(s.rank, "-"), columns, values) for s in summary.ranks)
    if values is not None and not any(values.get(r.rank) for r in summary.ranks):
        rows += f"<tr><td colspan='{len(titles)}'>no values were reported</td></tr>"
    # below 0 as the table shows it (-0.0 is 0: no note)
    if any(r.others_wait is not None and round(r.others_wait * 1000, 1) < 0 for r in summary.ranks):
        rows += f"<tr><td colspan='{len(titles)}'>{OTHERS_WAIT_NOTE}</td></tr>"
    picture = base64.b64encode(png).decode()
    style = "max-width:100%"
    if dark_png is not None:
        dark = base64.b64encode(dark_png).decode()
        style += f";--dn-dark-picture:url(data:image/png;base64,{dark})"
    said = (
        f"<div class='dist-notebook-verdict'>{html.escape(verdict_line(summary))}</div>"
        if summary.verdict
        else ""
    )
    return (
        f"<div class='dist-notebook-run'><div><b>{html.escape(header)}</b></div>{said}"
        f"<img src='data:image/png;base64,{picture}' class='dn-final-picture'"
        f" alt='{html.escape(header)}' style='{style}'/>"
        f"<table class='dist-notebook-ranks'><tr>{head}</tr>{rows}</table></div>"
    )


def text_summary(
    header: str, summary: RunSummary, states: dict[int, str], values: Values | None = None
) -> str:
    columns = _columns(summary, values)
    lines = [header]
    for s in summary.ranks:
        shown = " ".join(f"{n} {_fmt(_value(s, n, values), '{:.4g}')}" for n in columns)
        lines.append(
            f"rank {s.rank}: {states.get(s.rank, '-')} steps {_fmt(s.steps_done, '{}')} "
            f"{shown} samples/s {_fmt(s.samples_per_s, '{:,.0f}')}"
            + ("" if s.peak_mem is None else f" peak mem {memory(s.peak_mem)}")
            + (" straggler" if s.straggler else "")
            + (" starved" if s.starved else "")
        )
    if summary.verdict:
        lines.append(verdict_line(summary))
    return "\n".join(lines)
