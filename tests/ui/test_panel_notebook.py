"""End to end: a notebook starts a cluster and trains with the magics; the panel shows
the ranks and the live curve, and its Stop button stops the cluster."""

from __future__ import annotations

import importlib.util
import re

import pytest
from playwright.sync_api import expect

from .conftest import chart_fills, drag_left_panel, open_lab, open_panel, shot, write_cells

NOTEBOOK = "ui-test.ipynb"
TRAIN = """%%dist_train --name ui-test --steps 40
import time
from dist_notebook import report
for i in range(40):
    report(step=i, loss=1.0 / (i + 1), samples=32)
    time.sleep(0.1)
"""
KERNEL_IDLE = (
    "() => window.jupyterapp.shell.currentWidget"
    "?.sessionContext?.session?.kernel?.status === 'idle'"
)
CELLS = ["%load_ext dist_notebook", "%dist_cluster start -n 2 --cpu", TRAIN]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("dist_notebook.magics") is None,
    reason="the magics (dist_notebook.magics) are not there yet",
)


def write_notebook(lab) -> None:  # type: ignore[no-untyped-def]
    write_cells(lab.root / NOTEBOOK, CELLS)


def cell_errors(page) -> list[str]:  # type: ignore[no-untyped-def]
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    texts = [errors.nth(i).inner_text() for i in range(errors.count())]
    return [t for t in texts if "Error" in t or "Traceback" in t]


def test_notebook_run_shows_in_panel_and_stop_stops(lab, page):  # type: ignore[no-untyped-def]
    write_notebook(lab)
    open_lab(page, lab)
    panel = open_panel(page)
    page.goto(lab.lab_url(f"lab/tree/{NOTEBOOK}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    panel = open_panel(page)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(len(CELLS))
    page.wait_for_function(
        KERNEL_IDLE,
        timeout=60_000,
    )
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")

    # the cluster and its two ranks appear while the cluster starts and the run goes on
    cluster = panel.locator(".dn-cluster").first
    expect(cluster).to_be_visible(timeout=90_000)
    expect(cluster.locator(".dn-rank")).to_have_count(2)
    expect(cluster.locator('.dn-rank[data-rank="0"]')).to_be_visible()
    expect(cluster.locator('.dn-rank[data-rank="1"]')).to_be_visible()
    expect(panel.locator(".dn-current-run-title")).to_contain_text("ui-test", timeout=90_000)
    line = panel.locator('.dn-current-run path.dn-chart-line[data-rank="0"]')
    expect(line).to_have_attribute("d", re.compile(r"^M.+L.+"), timeout=60_000)
    shot(page, "notebook-running")

    # the last cell finishes: [3] in its prompt, no error in any output
    last_prompt = (
        page.locator(".jp-NotebookPanel .jp-Cell").nth(len(CELLS) - 1).locator(".jp-InputPrompt")
    )
    expect(last_prompt).to_contain_text("[3]", timeout=120_000)
    assert cell_errors(page) == []
    expect(panel.locator(".dn-current-run path.dn-chart-line")).to_have_count(3)  # + mean
    # idle again: no step or rate of a run that ended, its last run named as such
    expect(cluster.locator('.dn-rank[data-rank="0"] .dn-rank-step')).to_be_hidden()
    expect(cluster.locator(".dn-cluster-activity")).to_contain_text(
        "last run ui-test: succeeded", timeout=30_000
    )
    expect(cluster.locator(".dn-cluster-activity")).to_contain_text("step 40/40")
    expect(panel.locator(".dn-current-run-title")).to_contain_text("step 40/40")
    shot(page, "notebook-done")

    # the panel's chart spans the panel at its default width, its rank rows' columns (the
    # comm share last) uncut, and follows the panel when it is dragged wider
    chart = panel.locator(".dn-current-run .dn-chart")
    narrow = chart_fills(page, chart)
    drag_left_panel(page, 260)
    wide = chart_fills(page, chart, wider_than=narrow["svg"] + 200)
    shot(page, "notebook-panel-wide")
    drag_left_panel(page, -260)
    assert chart_fills(page, chart)["svg"] < wide["svg"] - 200, "it narrows again"

    # Stop, confirmed: the cluster stops and is folded into the history
    cluster_id = cluster.get_attribute("data-cluster-id")
    cluster.locator(".dn-stop-button").click()
    page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-warn").click()
    ended = panel.locator(f'.dn-ended-cluster[data-cluster-id="{cluster_id}"]')
    expect(ended).to_have_attribute("data-state", "stopped", timeout=60_000)
    expect(panel.locator(".dn-cluster")).to_have_count(0)
    shot(page, "notebook-stopped")
