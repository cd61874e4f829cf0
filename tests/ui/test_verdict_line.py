"""The run's verdict line where a person reads it, in chromium: above the cell's live chart
while 2 CPU ranks train (rank 1 sleeps 30 ms a step: the straggler), in the side panel's
current run beside it, and under the header of the end's picture; with dist-notebook's
labextension and without it (the anywidget the kernel ships draws the live view).

Screenshots (test-artifacts/ui/): verdict-running-<kind> (the cell's view, mid-run),
verdict-panel (the side panel's current run), verdict-final-<kind> (the end).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS, PANEL_TAB, open_panel, write_cells

expect.set_options(timeout=20_000)

NOTEBOOK = "verdict.ipynb"
END_FILE = "end-the-run"
# Goes until the test writes END_FILE (the ranks decide together, with an all_reduce: a
# rank that left alone would leave the other in DDP's next all-reduce).
TRAIN = """%%dist_train --name verdict --steps 100000
import os, time
import torch, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from dist_notebook import report
model = DDP(nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(100000):
    end = torch.tensor([float(os.path.exists({end!r}))])
    torch.distributed.all_reduce(end, op=torch.distributed.ReduceOp.MAX)
    if end.item():
        break
    if rank == 1:
        time.sleep(0.03)                # the straggler, on purpose
    loss = (model(torch.randn(64, 16)) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    report(step=i, loss=loss, samples=64)
"""
STRAGGLER = re.compile(r"^verdict: rank 1 is the straggler: the others wait \d+ ms of each step")
KERNEL_IDLE = (
    "() => window.jupyterapp.shell.currentWidget"
    "?.sessionContext?.session?.kernel?.status === 'idle'"
)
# Where the line is: its box, the chart's toolbar and plot below it, the view it is in,
# and whether its text is cut.
PLACE = """(view) => {
  const box = (sel) => { const e = view.querySelector(sel);
    if (!e) return null; const r = e.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, height: r.height}; };
  const line = view.querySelector('.dn-chart-verdict');
  return {line: box('.dn-chart-verdict'), toolbar: box('.dn-chart-toolbar'),
          plot: box('.dn-chart-plot'), view: view.getBoundingClientRect().toJSON(),
          cut: line.scrollWidth > line.clientWidth + 1,
          color: getComputedStyle(line).color, hidden: line.hidden};
}"""


def cell(page, index: int):  # type: ignore[no-untyped-def]
    return page.locator(".jp-NotebookPanel .jp-Cell").nth(index)


def start(page, lab) -> None:  # type: ignore[no-untyped-def]
    """Open the notebook (load, a 2-rank cluster, the training cell) and run it all."""
    cells = [
        "%load_ext dist_notebook",
        "%dist_cluster start -n 2 --cpu",
        TRAIN.format(end=str(lab.root / END_FILE)),
    ]
    write_cells(lab.root / NOTEBOOK, cells)
    page.goto(lab.lab_url(f"lab/tree/{NOTEBOOK}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(3, timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    page.evaluate("() => { void window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


def check_above_the_chart(view) -> dict:  # type: ignore[no-untyped-def]
    """The verdict line is the view's first row of the chart: shown, whole, above its
    toolbar and plot, inside the view."""
    place = view.evaluate(PLACE)
    line, toolbar, plot, box = place["line"], place["toolbar"], place["plot"], place["view"]
    assert not place["hidden"] and line["height"] > 0, place
    assert line["bottom"] <= toolbar["top"] + 1 and line["bottom"] <= plot["top"] + 1, place
    assert box["left"] - 1 <= line["left"] and line["right"] <= box["right"] + 1, place
    assert not place["cut"], place
    return place


def check_run(page, lab, kind: str, with_panel: bool) -> None:  # type: ignore[no-untyped-def]
    start(page, lab)
    live = cell(page, 2).locator(".dn-live")
    expect(live).to_be_visible(timeout=120_000)
    line = live.locator(".dn-chart-verdict")
    # mid-run: the line says who holds the run back, once the window has the steps
    expect(line).to_have_text(STRAGGLER, timeout=90_000)
    check_above_the_chart(live)
    progress = live.locator(".dn-live-progress")
    before = progress.text_content() or ""
    expect(progress).not_to_have_text(before, timeout=20_000)  # still running, still said
    expect(line).to_have_text(STRAGGLER)
    live.scroll_into_view_if_needed()
    live.screenshot(path=str(ARTIFACTS / f"verdict-running-{kind}.png"))
    if with_panel:
        panel = open_panel(page)
        current = panel.locator(".dn-current-run")
        expect(current.locator(".dn-chart-verdict")).to_have_text(STRAGGLER, timeout=30_000)
        check_above_the_chart(current)
        current.screenshot(path=str(ARTIFACTS / "verdict-panel.png"))
    (Path(lab.root) / END_FILE).write_text("")

    # the end: the line under the header of the end's picture, above the picture
    final = cell(page, 2).locator(".dist-notebook-run")
    expect(final).to_be_visible(timeout=120_000)
    said = final.locator(".dist-notebook-verdict")
    expect(said).to_have_text(STRAGGLER)
    order = final.evaluate(
        """(run) => { const top = (sel) => run.querySelector(sel).getBoundingClientRect().top;
          return [top('b'), top('.dist-notebook-verdict'), top('img.dn-final-picture')]; }"""
    )
    assert order == sorted(order) and order[0] < order[1] < order[2], order
    final.scroll_into_view_if_needed()
    final.screenshot(path=str(ARTIFACTS / f"verdict-final-{kind}.png"))


@pytest.mark.timeout(600)
def test_the_verdict_line_above_the_chart_in_the_panel_and_at_the_end(shared_lab, page):  # type: ignore[no-untyped-def]
    check_run(page, shared_lab, "lab", with_panel=True)


@pytest.mark.timeout(600)
def test_without_the_labextension_the_verdict_line_shows_too(lab_without_extension, page):  # type: ignore[no-untyped-def]
    expect_no_panel = lab_without_extension
    check_run(page, expect_no_panel, "noext", with_panel=False)
    expect(page.locator(PANEL_TAB)).to_have_count(0)
