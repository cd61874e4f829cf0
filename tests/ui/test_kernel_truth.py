"""What the kernel says, as a person sees it in JupyterLab (issue #24): an interrupted
cell on the ranks is one line, status shows busy ranks during a background run, a second
run is refused in one line, and a stopped cluster reads as stopped. Screenshots:
test-artifacts/ui/truth-interrupt, truth-status-busy, truth-refused, truth-status-stopped."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import shot, write_cells
from .test_debug_stdin import run_cell
from .test_live_anywidget import KERNEL_IDLE, cell, command

pytestmark = pytest.mark.timeout(400)

NOTEBOOK = "truth.ipynb"
CELLS = [
    "%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu",
    "%%dist\nimport time\nprint('in place', rank, flush=True)\ntime.sleep(120)",
    "%%dist_train --background --steps 2000 --no-dashboard\nimport time\n"
    "for step in range(2000):\n    time.sleep(0.05)\n    report(step=step, loss=1.0 / (1 + step))",
    "%dist_cluster status",
    "%%dist_train --steps 3\nreport(step=0, loss=1.0)",
    "%dist_cluster stop",
    "%dist_cluster status",
]


def run(page, index: int, shows: str, timeout: float = 120_000) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    run_cell(page, index)
    expect(cell(page, index)).to_contain_text(shows, timeout=timeout)


def test_interrupt_status_and_refusals_read_true(lab, page) -> None:  # type: ignore[no-untyped-def]
    write_cells(lab.root / NOTEBOOK, CELLS)
    page.goto(lab.lab_url(f"lab/tree/{NOTEBOOK}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
    run(page, 0, "ready")

    # The notebook's Stop (interrupt) once both ranks are in the cell.
    run_cell(page, 1)
    sleeping = cell(page, 1)
    expect(sleeping).to_contain_text("in place 0", timeout=60_000)
    expect(sleeping).to_contain_text("in place 1", timeout=60_000)
    command(page, "notebook:interrupt-kernel")
    expect(sleeping).to_contain_text("interrupted ranks 0,1; cluster ready", timeout=60_000)
    output = sleeping.locator(".jp-OutputArea").inner_text()
    assert "KeyboardInterrupt" not in output and "dist_notebook" not in output, output
    # The error is the one red output: no rank's interrupt marker, not even its blank line.
    red = sleeping.locator('[data-mime-type="application/vnd.jupyter.stderr"]')
    expect(red).to_have_count(1)
    assert red.inner_text().strip() == "interrupted ranks 0,1; cluster ready", red.inner_text()
    shot(page, "truth-interrupt")

    run(page, 2, "started in the background")
    run(page, 3, "in progress")
    status = cell(page, 3).locator(".jp-OutputArea").inner_text()
    assert status.count("busy") >= 2, status  # both ranks, while the run holds them
    shot(page, "truth-status-busy")
    run(page, 4, "%%dist_train: cannot start another run")
    refused = cell(page, 4).locator(".jp-OutputArea").inner_text()
    assert "Traceback" not in refused and len(refused.strip().splitlines()) == 1, refused
    shot(page, "truth-refused")

    run(page, 5, "stopped")
    stopping = cell(page, 5).locator(".jp-OutputArea").inner_text()
    assert "process group" not in stopping, stopping  # a stop re-makes nothing first
    run(page, 6, "stopped; start one with %dist_cluster start")
    stopped = cell(page, 6).locator(".jp-OutputArea").inner_text()
    assert "idle" not in stopped and "pid" not in stopped, stopped  # no table of dead pids
    shot(page, "truth-status-stopped")
