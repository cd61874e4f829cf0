"""``%dist_debug 1`` in a real JupyterLab (issue #26): pdb on rank 1 answered through the
notebook's own input box, as a user types into it in chromium; the cell ends normally
after ``q`` and the cluster takes the next cell. Screenshot: test-artifacts/ui/debug-stdin."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import shot, write_cells
from .test_live_anywidget import KERNEL_IDLE, cell, command

pytestmark = pytest.mark.timeout(300)

NOTEBOOK = "debug.ipynb"
CELLS = [
    "%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu",
    "%%dist\ndef scale(a):\n    local = a * 10\n    return local / (a - rank)\n\n"
    "total = scale(1) if rank == 1 else 0",
    "%dist_debug 1",
    "%%dist\nprint('after', rank)",
]


def run_cell(page, index: int) -> None:  # type: ignore[no-untyped-def]
    page.evaluate(
        "(i) => { window.jupyterapp.shell.currentWidget.content.activeCellIndex = i; }", index
    )
    command(page, "notebook:run-cell")


def answer(page, text: str) -> None:  # type: ignore[no-untyped-def]
    box = page.locator(".jp-Stdin-input").last
    expect(box).to_be_visible(timeout=60_000)
    box.fill(text)
    box.press("Enter")


def test_dist_debug_is_answered_through_the_notebooks_input_box(lab, page) -> None:  # type: ignore[no-untyped-def]
    write_cells(lab.root / NOTEBOOK, CELLS)
    page.goto(lab.lab_url(f"lab/tree/{NOTEBOOK}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    run_cell(page, 0)
    expect(cell(page, 0)).to_contain_text("ready", timeout=120_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    run_cell(page, 1)
    expect(cell(page, 1)).to_contain_text("ZeroDivisionError", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    run_cell(page, 2)
    debug = cell(page, 2)
    expect(debug).to_contain_text("pdb on rank 1 (q to quit)", timeout=60_000)
    expect(debug.locator(".jp-Stdin-prompt").last).to_contain_text("(Pdb rank 1)")
    answer(page, "p local")
    expect(debug).to_contain_text("10", timeout=30_000)
    answer(page, "p a, rank")
    expect(debug).to_contain_text("(1, 1)", timeout=30_000)
    shot(page, "debug-stdin")
    answer(page, "q")
    expect(debug).to_contain_text("pdb on rank 1 ended", timeout=30_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    run_cell(page, 3)
    out = cell(page, 3).locator(".jp-OutputArea")  # its output, not its source
    expect(out).to_contain_text("after 0", timeout=60_000)
    expect(out).to_contain_text("after 1", timeout=60_000)
    command(page, "kernelmenu:shutdown")
