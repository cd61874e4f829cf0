"""Views at scale: the status table by node with each node's slowest rank, opened to its
ranks in a notebook; the static picture banded beyond 8 ranks as the live chart is
(median, min-max band, the ranks that deviate most and the stragglers named)."""

from __future__ import annotations

import math
import re

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dist_notebook.cluster.cluster import RankInfo
from dist_notebook.display.band import band_of, most_deviating
from dist_notebook.display.final import _bars, _curves, draw_png
from dist_notebook.magics.output import nodes_table
from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import Record


def ranks64() -> list[RankInfo]:
    return [
        RankInfo(r, r, f"gpu{r // 8}", 100 + r, f"cuda:{r % 8}", "nccl", "busy", r // 8)
        for r in range(64)
    ]


def test_nodes_table_names_each_nodes_slowest_rank() -> None:
    times: dict[int, float | None] = {r: 0.010 + r * 1e-5 for r in range(64)}
    times[21] = 0.050
    times[40] = None  # no time yet: not the node's slowest
    table = nodes_table(ranks64(), "cluster x", times, stragglers=[21])
    assert table.columns[-1] == "slowest"
    slowest = [row[-1] for row in table.rows]
    assert slowest == ["7", "15", "21 straggler", "31", "39", "47", "55", "63"]
    assert nodes_table(ranks64(), "t", {}).rows[0][-1] == "-"
    alike = nodes_table(ranks64(), "t", dict.fromkeys(range(64), 0.01))
    assert {row[-1] for row in alike.rows} == {"-"}  # all alike: none is the slowest
    assert "slowest" not in nodes_table(ranks64(), "t").columns  # no run: no column


def test_nodes_table_opens_to_its_ranks_in_a_notebook() -> None:
    page = nodes_table(ranks64(), "cluster x")._repr_html_()
    assert page.count("<details>") == 8
    node2 = re.search(r"<tr data-node='2'>.*?</details>", page)
    assert node2 is not None
    assert "<summary>16-23</summary>" in node2.group(0)
    for r in range(16, 24):
        assert f"<td>{r}</td><td>gpu2</td><td>{100 + r}</td>" in node2.group(0)
    assert "<td>24</td>" not in node2.group(0)


def test_band_of_gives_median_and_min_max_and_names_who_strays() -> None:
    xs = [float(s) for s in range(30)]
    series = {
        r: (xs, [1 / (1 + s) + (0.5 if r == 9 else -0.3 if r == 20 else 0.0) for s in xs])
        for r in range(32)
    }
    band = band_of(series, 500)
    assert len(band.x) == 30
    assert all(math.isclose(hi - lo, 0.8) for lo, hi in zip(band.lo, band.hi, strict=True))
    assert most_deviating(band.deviation) == [9, 20]
    even = band_of({r: (xs, [x + 0.01 * r for x in xs]) for r in range(32)}, 500)
    assert most_deviating(even.deviation) == []  # the band's edges are not strays
    same = band_of({r: (xs, xs) for r in range(16)}, 500)
    assert most_deviating(same.deviation) == []  # equal curves name nobody


def metrics16() -> RunMetrics:
    m = RunMetrics(list(range(16)))
    recs = []
    for step in range(40):
        for r in range(16):
            loss = 2.0 / (1 + 0.1 * step) + (0.4 if r == 5 else 0.0) + 0.001 * r
            recs.append(
                Record(
                    rank=r,
                    step=step,
                    time=1000.0 + step * 0.05 + r * 1e-4,
                    step_time=0.05,
                    comm_time=0.01 if r == 12 else 0.04,
                    samples=32.0,
                    metrics={"loss": loss},
                )
            )
    m.add(recs)
    return m


def test_the_picture_is_banded_beyond_8_ranks() -> None:
    m = metrics16()
    summary = m.run_summary("r", "succeeded", 40)
    figure = Figure()
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    _curves(ax, m, "loss", legend=True, stragglers={12})
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(labels[:2]) == ["median of 16 ranks", "min-max"]
    assert "rank 5 (deviates most)" in labels
    assert "rank 12 (straggler)" in labels
    assert len(ax.get_lines()) <= 2 + 3  # the median and the named ranks, not 16 lines
    bars = figure.add_subplot()
    _bars(bars, summary)
    assert bars.get_title().startswith("samples/s: the slowest")
    assert len(bars.patches) <= 8 + 1
    assert draw_png(m, summary)[:4] == b"\x89PNG"


def test_the_picture_has_a_ranks_by_steps_heatmap_beyond_8_ranks() -> None:
    import io

    import numpy as np
    from matplotlib.image import imread

    from dist_notebook.display.band import heat_of, heat_rgba, hottest
    from dist_notebook.display.final import HEAT_BASE, _heatmap

    m = metrics16()
    heat = heat_of({r: m.records(r) for r in m.ranks}, 240)
    assert heat is not None
    # comm time is reported: step minus comm, where rank 12 (less comm) is the slow one
    assert heat.key == "outside" and len(heat.ranks) == 16 and hottest(heat) == 12
    assert heat_rgba(heat.median, heat.median, HEAT_BASE) == HEAT_BASE
    r, g, b, a = heat_rgba(heat.rows[12][0], heat.median, HEAT_BASE)
    assert (round(r * 255), round(g * 255), round(b * 255), a) == (214, 39, 40, 1.0)
    figure = Figure()
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    assert _heatmap(ax, m, {12}) == [12]  # its label goes red
    assert ax.get_title().startswith("per rank: step − comm time (s) · median 0.01 s")
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"rank {r}" for r in range(16)]
    # in the PNG: a full-red line (rank 12's row) under the curves; none at 8 ranks
    png = imread(io.BytesIO(draw_png(m, m.run_summary("r", "succeeded", 40))))
    red = (png[..., 0] > 0.8) & (png[..., 1] < 0.2) & (png[..., 2] < 0.2) & (png[..., 3] > 0.95)
    rows = np.nonzero(red.sum(axis=1) > 300)[0]
    assert len(rows) >= 3 and rows.min() > png.shape[0] // 2
    eight = RunMetrics(list(range(8)))
    eight.add([rec for r in range(8) for rec in m.records(r)])
    small = imread(io.BytesIO(draw_png(eight, eight.run_summary("r", "succeeded", 40))))
    assert small.shape[0] < png.shape[0]
