"""The cell's live view in Jupyter Notebook 7 (the `notebook` package, its own front end on
JupyterLab's components): the anywidget draws the chart mid-run and the end's picture
replaces it. Skipped where `notebook` 7 is not installed (it is in the `lab` extra).

Screenshots (test-artifacts/ui/): nb7-running (mid-run), nb7-finished (the end).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS, shot, write_cells

expect.set_options(timeout=20_000)

NOTEBOOK = "nb7.ipynb"
TRAIN = """%%dist_train --name nb7 --steps 300
import time
from dist_notebook import report
for i in range(300):
    report(step=i, loss=1.0 / (i + 1) + 0.1 * rank, acc=i / 300, samples=16)
    time.sleep(0.03)
"""
CELLS = ["%load_ext dist_notebook", "%dist_cluster start -n 2 --cpu", TRAIN]
KERNEL_IDLE = (
    "() => window.jupyterapp.shell.currentWidget"
    "?.sessionContext?.session?.kernel?.status === 'idle'"
)


@pytest.mark.timeout(600)
def test_notebook7_draws_the_live_chart_and_ends_with_the_picture(notebook7, page):  # type: ignore[no-untyped-def]
    write_cells(notebook7.root / NOTEBOOK, CELLS)
    page.goto(notebook7.lab_url(f"notebooks/{NOTEBOOK}"))
    cells = page.locator(".jp-NotebookPanel .jp-Cell")
    expect(cells).to_have_count(len(CELLS), timeout=60_000)
    # Notebook 7, not JupyterLab: its own shell
    assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    page.evaluate("() => { void window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    live = cells.nth(2).locator(".dn-live")
    expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
        "d", re.compile(r"^M.+L.+"), timeout=120_000
    )
    expect(live.locator(".dn-live-progress")).to_contain_text("step")
    live.scroll_into_view_if_needed()
    shot(page, "nb7-running")
    live.screenshot(path=str(ARTIFACTS / "nb7-running-view.png"))
    out = cells.nth(2).locator(".dist-notebook-run")
    expect(out).to_contain_text("nb7: succeeded in", timeout=120_000)
    expect(out.locator("img")).to_be_visible()
    expect(out.locator("th")).to_contain_text(["loss", "acc"])  # every metric's column
    expect(cells.nth(2).locator(".dn-live")).to_have_count(0)
    out.scroll_into_view_if_needed()
    shot(page, "nb7-finished")
