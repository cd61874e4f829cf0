"""The end's picture and table, and the text progress, on plain data (no cluster): every
metric reported is drawn and tabled, a run without values says so, the PNG is
transparent, and the text line lists ranks one by one up to PER_RANK, then min/median/max; on a dark
theme the picture's text is light (its twin in DARK_INK, carried by the HTML)."""

from __future__ import annotations

import base64
import io
import re

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.image import imread

from dist_notebook.display.final import (
    DARK_INK,
    INK,
    draw,
    draw_png,
    final_html,
    last_values,
    pictures,
    text_summary,
)
from dist_notebook.display.textlive import PER_RANK, progress_lines
from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import Record


def run(ranks: int, steps: int, **extra: float) -> RunMetrics:
    """*ranks* ranks' *steps* records of loss (and of each name in *extra*, at that value)."""
    m = RunMetrics(list(range(ranks)))
    m.add(
        [
            Record(
                rank=r,
                step=s,
                time=1000.0 + s * 0.1 + r * 1e-3,
                step_time=0.1,
                samples=32.0,
                metrics={"loss": 2.0 / (s + 1) + 0.1 * r, **extra},
            )
            for s in range(steps)
            for r in range(ranks)
        ]
    )
    return m


def texts(figure) -> list[str]:  # type: ignore[no-untyped-def]
    return [t.get_text() for ax in figure.axes for t in ax.texts]


def test_every_reported_metric_has_a_panel_and_a_column() -> None:
    m = run(2, 20, acc=0.75, lr=0.01)
    summary = m.run_summary("r", "succeeded", 20)
    titles = [ax.get_title() for ax in draw(m, summary).axes]
    assert titles[:2] == ["loss", "samples/s"]  # the main metric beside the bars
    assert sorted(titles[2:]) == ["acc", "lr"]
    values, states = last_values(m), {0: "done", 1: "done"}
    table = final_html("r: succeeded", draw_png(m, summary), summary, states, values)
    head = re.findall(r"<th>(.*?)</th>", table)
    assert head[4:7] == ["loss", "acc", "lr"]
    for rank in (0, 1):
        row = re.search(rf"<tr data-rank='{rank}'[^>]*>(.*?)</tr>", table)
        assert row, table
        cells = re.findall(r"<td>(.*?)</td>", row.group(1))
        assert cells[5:7] == ["0.75", "0.01"], cells
    plain = text_summary("r: succeeded", summary, states, values)
    assert "acc 0.75 lr 0.01" in plain.splitlines()[1]


def test_a_run_without_values_says_so_instead_of_drawing_empty_axes() -> None:
    m = RunMetrics([0, 1])
    summary = m.run_summary("r", "failed", 20)
    figure = draw(m, summary)
    assert "no values were reported" in texts(figure)
    assert "no samples reported" in texts(figure)
    for ax in figure.axes:
        assert list(ax.get_xticks()) == [] and list(ax.get_yticks()) == []  # no 0..1 axes
    table = final_html("r: failed", draw_png(m, summary), summary, {}, last_values(m))
    assert "no values were reported" in table
    assert progress_lines("r", summary, m, started=0.0, now=1.0)[1] == "no values reported yet"


def test_the_picture_is_transparent_so_it_reads_on_a_dark_theme() -> None:
    m = run(2, 10)
    pixels = imread(io.BytesIO(draw_png(m, m.run_summary("r", "succeeded", 10))), format="png")
    assert pixels.shape[2] == 4
    assert pixels[0, 0, 3] == 0 and pixels[-1, -1, 3] == 0  # corners: nothing painted
    assert pixels[..., 3].max() == 1.0  # and the curves are drawn opaque


JUPYTERLAB_DARK = (0x11 / 255,) * 3  # --jp-layout-color0 of JupyterLab Dark


def _brightest_grey_on(png: bytes, background: tuple[float, ...]) -> float:
    """The brightest grey (text, axes, the mean) of *png* laid on *background*."""
    rgba = imread(io.BytesIO(png), format="png")
    alpha = rgba[..., 3:4]
    seen = rgba[..., :3] * alpha + np.array(background) * (1 - alpha)
    grey = (np.ptp(rgba[..., :3], axis=2) < 0.02) & (rgba[..., 3] > 0.5)
    return float(seen[grey].mean(axis=1).max())


def test_on_a_dark_theme_the_legend_ticks_and_titles_are_light() -> None:
    m = run(2, 30, acc=0.5)
    summary = m.run_summary("r", "succeeded", 30)
    figure = draw(m, summary, DARK_INK)
    first = figure.axes[0]
    shown = [
        *first.get_legend().get_texts(),
        *(t for ax in figure.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels())),
        *(ax.title for ax in figure.axes),
        *(t for ax in figure.axes for t in ax.texts),  # the bars' numbers
    ]
    assert len(shown) > 20
    assert {to_rgb(t.get_color()) for t in shown} == {to_rgb(DARK_INK)}
    grey, dark = pictures(m, summary)
    assert _brightest_grey_on(grey, JUPYTERLAB_DARK) < 0.55  # the grey: #808080 at best
    assert _brightest_grey_on(dark, JUPYTERLAB_DARK) > 0.75  # DARK_INK's #d0d0d0
    assert to_rgb(INK) == (0x80 / 255,) * 3  # the grey picture is unchanged
    # the HTML carries both: the grey one shows anywhere, the dark theme's CSS picks the twin
    html = final_html("r: succeeded", grey, summary, {}, last_values(m), dark_png=dark)
    assert f"src='data:image/png;base64,{base64.b64encode(grey).decode()}'" in html
    assert f"--dn-dark-picture:url(data:image/png;base64,{base64.b64encode(dark).decode()})" in (
        html
    )
    assert "class='dn-final-picture'" in html


def test_the_text_progress_lists_ranks_up_to_per_rank_then_min_median_max() -> None:
    few = run(2, 25)
    summary = few.run_summary("r", "running", 100)
    header, values, said = progress_lines("r", summary, few, started=100.0, now=110.0)
    assert said == "verdict: healthy"
    assert "step 25/100" in header and "ETA 30 s" in header and "samples/s" in header
    assert re.fullmatch(r"loss: rank 0 0\.08 · rank 1 0\.18", values), values
    many = run(PER_RANK + 4, 5)
    lines = progress_lines("r", many.run_summary("r", "running", 10), many, 0.0, 1.0)
    # loss at step 4 is 0.4 + 0.1 * rank: ranks 0..11
    assert lines[1] == f"loss over {PER_RANK + 4} ranks: min 0.4 · median 0.95 · max 1.5"
    done = progress_lines("r", few.run_summary("r", "succeeded", 25), few, 0.0, 9.0)[0]
    assert "ETA" not in done  # only while it runs
