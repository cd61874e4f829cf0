"""The cell's live view of a real 32-rank run (local CPU ranks, the fork server) in
JupyterLab and chromium: the chart banded (median, min-max band, no curve per rank) from
the records the live feed sends, the ranks x time heatmap where the rank that sleeps longer
each step is the hottest row, `%dist_cluster status` during the run a row per node with the
busy ranks and the slowest rank (its ranks cell opens to the ranks), and the end's picture.

The heatmap follows the theme (redrawn in JupyterLab Dark's colours); the end's picture has
the ranks x steps heatmap too, the slow rank a red row.

Screenshots (test-artifacts/ui/): live32-running and live32-running-dark (the cell's view
mid-run, light and JupyterLab Dark), live32-status (the status table, its node opened),
live32-final and live32-final-dark (the end's banded picture with its heatmap).
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from matplotlib.image import imread
from playwright.sync_api import expect

from .conftest import ARTIFACTS, write_cells

NOTEBOOK = "live32.ipynb"
RANKS = 32
SLOW = 21
# No all-reduce: each rank's own pace, so the slow rank's step time is its own.
# Long enough (the slow rank: 40 s) for a busy machine's page to draw the view mid-run.
TRAIN = f"""%%dist_train --background --name live32 --steps 330
import time
for step in range(330):
    time.sleep(0.12 if rank == {SLOW} else 0.03)
    report(step=step, loss=1.0 / (1 + step) + 0.001 * rank, samples=8)
"""
CELLS = [
    "%load_ext dist_notebook",
    f"%dist_cluster start -n {RANKS} --cpu",
    TRAIN,
    "import time; time.sleep(4)",  # some steps in before the status
    "%dist_cluster status",
]
KERNEL_IDLE = (
    "() => window.jupyterapp.shell.currentWidget"
    "?.sessionContext?.session?.kernel?.status === 'idle'"
)


# The heatmap's median cell in JupyterLab Dark (chart.css --dn-heat-mid: --jp-layout-color2).
DARK_MID = "66,66,66"


def theme(page, dark: bool) -> None:  # type: ignore[no-untyped-def]
    name = "JupyterLab Dark" if dark else "JupyterLab Light"
    page.evaluate(
        "(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", name
    )
    page.wait_for_function(
        "(l) => document.body.dataset.jpThemeLight === l",
        arg="false" if dark else "true",
        timeout=30_000,
    )


def snap(page, locator, name: str) -> None:  # type: ignore[no-untyped-def]
    """A screenshot of *locator*'s box on the page: the live view redraws several times a
    second, and a busy machine's page never held the element still for the element
    screenshot's stability wait (it timed out)."""
    locator.scroll_into_view_if_needed()
    box = locator.bounding_box()
    assert box is not None
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), clip=box)


def cell(page, index: int):  # type: ignore[no-untyped-def]
    return page.locator(".jp-NotebookPanel .jp-Cell").nth(index)


@pytest.mark.timeout(600)
def test_live_view_of_32_ranks_is_banded_with_a_heatmap(lab, page):  # type: ignore[no-untyped-def]
    write_cells(lab.root / NOTEBOOK, CELLS)
    page.goto(lab.lab_url(f"lab/tree/{NOTEBOOK}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    page.evaluate("() => { void window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

    live = cell(page, 2).locator(".dn-live")
    expect(live).to_be_visible(timeout=300_000)  # 32 ranks start first
    chart = live.locator(".dn-chart")
    expect(chart).to_have_attribute("data-banded", "true", timeout=60_000)
    expect(chart.locator("path.dn-chart-line[data-rank='median']")).to_have_count(1)
    assert chart.locator("path.dn-chart-line").count() <= 1 + 3 + 1
    heat = chart.locator(".dn-chart-heat")
    expect(heat).to_have_attribute("data-ranks", str(RANKS), timeout=60_000)
    expect(heat).to_have_attribute("data-series", "system:step_time")
    expect(heat).to_have_attribute("data-hottest", str(SLOW), timeout=60_000)
    # The cell, not the view's element: a view re-made by the page (its output re-rendered)
    # is a new element, and the old one detached from the DOM failed the screenshot in CI.
    snap(page, cell(page, 2), "live32-running")
    # JupyterLab Dark: the heatmap drawn again in its colours (a dark median cell)
    theme(page, dark=True)
    expect(heat).to_have_attribute("data-mid", DARK_MID, timeout=30_000)
    snap(page, cell(page, 2), "live32-running-dark")
    theme(page, dark=False)  # (light again: the run may end meanwhile; its view goes)

    # status during the run: a row per node, busy ranks, the run's slowest rank
    status = cell(page, 4).locator(".jp-OutputArea-output table.dist-notebook-table").first
    expect(status).to_be_visible(timeout=120_000)
    expect(status.locator("caption")).to_contain_text("run live32 in progress")
    expect(status).to_contain_text(f"{RANKS} busy")
    expect(status.locator("tr").first).to_contain_text("slowest")
    status.locator("summary").first.click()
    expect(status.locator("details table tr")).to_have_count(1 + RANKS)
    status.screenshot(path=str(ARTIFACTS / "live32-status.png"))

    # the end: the banded picture
    final = cell(page, 2).locator(".dist-notebook-run")
    expect(final.locator("img")).to_be_visible(timeout=300_000)
    expect(final).to_contain_text("live32: succeeded in")
    final.locator("img").screenshot(path=str(ARTIFACTS / "live32-final.png"))
    # the picture's heatmap: the slow rank a full-red row under the curves
    src = final.locator("img").get_attribute("src") or ""
    png = imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
    red = (png[..., 0] > 0.8) & (png[..., 1] < 0.2) & (png[..., 2] < 0.2) & (png[..., 3] > 0.95)
    rows = np.nonzero(red.sum(axis=1) > png.shape[1] // 3)[0]
    # (a red row above it is the straggler's own curve, drawn red where it runs flat)
    under = rows[rows > png.shape[0] // 2]
    assert len(under) >= 2, rows
    theme(page, dark=True)  # the same picture on JupyterLab Dark (it is transparent)
    final.locator("img").screenshot(path=str(ARTIFACTS / "live32-final-dark.png"))
    theme(page, dark=False)
