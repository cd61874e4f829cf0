"""The live view of a ``--background`` run after ``%dist_cluster attach``, in JupyterLab as a
person sees it: the header counts the run's own time (more than the seconds since the
attach), shows ``step N/150`` and an ETA; when the run ends the view becomes the end's
picture and the line under it says "ended succeeded after N s", not "is in progress:
following it". Screenshot: test-artifacts/ui/attach-view.png.
"""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from .conftest import shot, write_cells
from .test_debug_stdin import run_cell
from .test_live_anywidget import KERNEL_IDLE, cell

pytestmark = pytest.mark.timeout(400)

NOTEBOOK = "attach-view.ipynb"
STEPS = 150
CELLS = [
    "%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu --detach",
    f"%%dist_train --background --name attached-view --steps {STEPS}\n"
    "import time, torch, torch.distributed as dist\n"
    f"for i in range({STEPS}):\n"
    "    dist.all_reduce(torch.ones(1))\n"
    "    report(step=i, loss=1.0 / (i + 1), samples=8)\n"
    "    time.sleep(0.08)",
    "import time\ntime.sleep(5)\n%dist_cluster detach",
    "%dist_cluster attach",
    "%dist_cluster stop",
]
HEADER = re.compile(rf"^(\d+) s · step (\d+)/{STEPS} · ETA (\d+) s")


def test_the_attached_view_shows_the_runs_clock_steps_eta_and_end(shared_lab, page) -> None:  # type: ignore[no-untyped-def]
    lab = shared_lab
    write_cells(lab.root / NOTEBOOK, CELLS)
    page.goto(lab.lab_url(f"lab/tree/{NOTEBOOK}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
    try:
        for index, text in enumerate(["is detached", "attached-view", "goes on without"]):
            page.wait_for_function(KERNEL_IDLE, timeout=60_000)
            run_cell(page, index)
            expect(cell(page, index).locator(".jp-OutputArea")).to_contain_text(
                text, timeout=120_000
            )
        page.wait_for_function(KERNEL_IDLE, timeout=60_000)
        run_cell(page, 3)
        attached_at = time.monotonic()
        output = cell(page, 3).locator(".jp-OutputArea")
        expect(output).to_contain_text("is in progress: following it", timeout=60_000)
        progress = output.locator(".dn-live-progress")
        expect(progress).to_have_text(HEADER, timeout=60_000)
        header = HEADER.match(progress.inner_text())
        assert header is not None
        since_attach = time.monotonic() - attached_at
        # the run's clock: it began 5 s and more before the attach
        assert int(header.group(1)) >= since_attach + 4, (header.group(0), since_attach)
        shot(page, "attach-view")
        # the end's picture and table in place of the live view
        expect(output).to_contain_text(
            re.compile(r"attached-view: succeeded in [\d.]+ s, step 150/150"), timeout=240_000
        )
        expect(output.locator("img")).to_be_visible()
        expect(output).to_contain_text(
            re.compile(r"run attached-view \(\w+\) ended succeeded after \d+ s"), timeout=30_000
        )
        assert "is in progress: following it" not in output.inner_text()
    finally:
        page.wait_for_function(KERNEL_IDLE, timeout=60_000)
        run_cell(page, 4)  # the detached cluster outlives the kernel: stop it
        expect(cell(page, 4).locator(".jp-OutputArea")).to_contain_text("stop", timeout=120_000)
