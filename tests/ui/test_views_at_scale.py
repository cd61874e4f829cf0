"""Views at scale in a real JupyterLab and chromium, from a 32-rank run that the real
run-store writer recorded: the run chart banded (median, min-max band, the ranks that
deviate most named, any rank pickable), the ranks x time heatmap where the slow rank is a
line (a click on its row draws it), and the panel's cluster card a row per node with its
rank range, states and slowest rank, opened to its ranks on a click. Screenshots:
scale-run-tab.png, scale-chart.png, scale-panel-nodes.png."""

from __future__ import annotations

import os
import time
import uuid

from playwright.sync_api import expect

from dist_notebook.protocol import Record
from dist_notebook.store import StoreWriter

from .conftest import ARTIFACTS, open_lab, open_panel, shot

RANKS = 32
SLOW = 21  # computes 32 ms more a step; the others wait for it in the all-reduce
ODD = 6  # its loss strays from the others' (a different shard)


def records(steps: range, t0: float) -> list[Record]:
    out = []
    for step in steps:
        for rank in range(RANKS):
            comm = 0.004 if rank == SLOW else 0.036
            loss = 2.0 / (1 + 0.1 * step) + 0.002 * rank + (0.6 if rank == ODD else 0.0)
            out.append(
                Record(
                    rank=rank,
                    step=step,
                    time=t0 + 0.04 * step + 0.0005 * rank,
                    step_time=0.04,
                    comm_time=comm,
                    samples=32.0,
                    metrics={"loss": loss},
                )
            )
    return out


def fill(writer: StoreWriter, cluster: str, run: str) -> None:
    writer.add_cluster(
        cluster, n=RANKS, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    writer.set_cluster_state(cluster, "ready")
    writer.set_ranks(
        cluster,
        [
            {
                "rank": r,
                "host": f"node{r // 8}",
                "pid": 2000 + r,
                "device": "cpu",
                "state": "dead" if r == 13 else "busy",
                "node_rank": r // 8,
            }
            for r in range(RANKS)
        ],
    )
    writer.add_run(
        run, name="scale32", cluster_id=cluster, ranks=list(range(RANKS)), steps=60, code=""
    )
    writer.set_run_state(run, "running")


# Whether the heatmap's canvas, at rank 0's row (a median row) 60% across, is light (arg
# true) or dark: the mean of its RGB against the middle grey.
HEAT_PIXEL_IS = """([light, run]) => {
  const view = `.dn-runview[data-run-id="${run}"]`;  // not another run's tab left open
  const canvas = document.querySelector(`${view} .dn-chart-heat canvas`);
  if (!canvas || !canvas.width) return false;
  const ctx = canvas.getContext('2d');
  const x = Math.floor(canvas.width * 0.6), y = 1;
  const [r, g, b, a] = ctx.getImageData(x, y, 1, 1).data;
  const mean = (r + g + b) / 3;
  return a > 0 && (light ? mean > 180 : mean < 110);
}"""


def test_32_ranks_banded_chart_heatmap_and_nodes(shared_lab, page):  # type: ignore[no-untyped-def]
    lab = shared_lab
    cluster, run = f"c-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    writer = StoreWriter(lab.store)
    try:
        fill(writer, cluster, run)
        writer.append_metrics(run, records(range(60), time.time() - 3))
        open_lab(page, lab)

        # the panel: a row per node, opened to its ranks on a click
        panel = open_panel(page)
        card = panel.locator(f".dn-cluster[data-cluster-id='{cluster}']")
        expect(card).to_be_visible(timeout=30_000)
        nodes = card.locator("tr.dn-node-row")
        expect(nodes).to_have_count(4)
        expect(card.locator("tr.dn-rank")).to_have_count(0)
        expect(nodes.nth(1)).to_contain_text("ranks 8-15")
        expect(nodes.nth(1)).to_contain_text("1 dead, 7 busy")
        # the run's summary came: the slowest rank of node 2 is the slow one
        expect(nodes.nth(2)).to_have_attribute("data-slowest", str(SLOW), timeout=30_000)
        expect(nodes.nth(2)).to_contain_text(f"slowest rank {SLOW}")
        nodes.nth(2).click()
        expect(card.locator("tr.dn-rank")).to_have_count(8)
        expect(card.locator("tr.dn-rank").first).to_have_attribute("data-rank", "16")
        expect(nodes.nth(2)).to_have_attribute("data-open", "true")
        card.screenshot(path=str(ARTIFACTS / "scale-panel-nodes.png"))

        # the run tab: banded beyond 8 ranks
        page.evaluate(
            "id => { void window.jupyterapp.commands.execute('dist-notebook:open-run',"
            " {runId: id}); }",
            run,
        )
        view = page.locator(f'.dn-runview[data-run-id="{run}"]')
        expect(view).to_be_visible(timeout=30_000)
        chart = view.locator(".dn-chart")
        expect(chart).to_have_attribute("data-banded", "true", timeout=30_000)
        assert (chart.locator("path.dn-chart-band").get_attribute("d") or "").count("Z") == 1
        expect(chart.locator("path.dn-chart-line[data-rank='median']")).to_have_count(1)
        expect(chart.locator("path.dn-chart-line[data-rank='mean']")).to_have_count(0)
        # the ranks the band names, not 32 lines: the stray loss and the slow rank
        legend = chart.locator(".dn-chart-legend")
        expect(legend.locator(f"[data-rank='{ODD}']")).to_contain_text("deviates most")
        expect(legend).to_contain_text(f"median of {RANKS} ranks")
        lines = chart.locator("path.dn-chart-line").count()
        assert 2 <= lines <= 1 + 3 + 1, lines
        # the heatmap: a row per rank, the slow rank its hottest row
        heat = chart.locator(".dn-chart-heat")
        expect(heat).to_be_visible()
        expect(heat).to_have_attribute("data-ranks", str(RANKS))
        expect(heat).to_have_attribute("data-hottest", str(SLOW))
        expect(heat).to_have_attribute("data-series", "outside")
        shot(page, "scale-run-tab")
        chart.screenshot(path=str(ARTIFACTS / "scale-chart.png"))
        for theme, light in (("JupyterLab Dark", "false"), ("JupyterLab Light", "true")):
            page.evaluate(
                "(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})",
                theme,
            )
            page.wait_for_function(
                "(l) => document.body.dataset.jpThemeLight === l", arg=light, timeout=30_000
            )
            # the heatmap is drawn again in the theme's colours: its median cells (rank 0's
            # row) a dark grey on the dark theme, a light one on the light, its labels too
            page.wait_for_function(HEAT_PIXEL_IS, arg=[light == "true", run], timeout=30_000)
            if light == "false":  # the band, lines and heatmap as read on the dark theme
                chart.screenshot(path=str(ARTIFACTS / "scale-chart-dark.png"))

        # any rank pickable: from the toolbar, and by a click on its heatmap row
        chart.locator("select.dn-chart-pick").select_option("30")
        expect(chart.locator("path.dn-chart-line[data-rank='30']")).to_have_count(1)
        expect(legend.locator("[data-rank='30']")).to_have_attribute("data-named", "picked")
        legend.locator("[data-rank='30']").click()  # dropped again
        expect(chart.locator("path.dn-chart-line[data-rank='30']")).to_have_count(0)
        canvas = heat.locator("canvas")
        box = canvas.bounding_box()
        assert box is not None
        row = box["height"] / RANKS
        canvas.click(position={"x": box["width"] * 0.6, "y": row * (2 + 0.5)})
        expect(chart.locator("path.dn-chart-line[data-rank='2']")).to_have_count(1)
        # the step time alone is the same on every rank in lockstep: no line stands out
        heat.locator("select").select_option("system:step_time")
        expect(heat).to_have_attribute("data-series", "system:step_time")
        # the bars: the slowest few, all on a click
        bars = chart.locator(".dn-chart-rank-rows .dn-chart-bar-row")
        assert bars.count() <= 5, bars.count()
        chart.locator("button.dn-chart-bars-more").click()
        expect(bars).to_have_count(RANKS)
        writer.set_run_state(run, "succeeded")
    finally:
        writer.close()
