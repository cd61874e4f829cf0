"""Progress lines in JupyterLab, as a person sees them and as the file keeps them: the
start cell shows only its table once the cluster is ready, a cell whose rank raised (the
process group re-made in it) keeps no ``[  0.0 s] creating the gloo process group``, a
later cell gets none, and the saved notebook holds none. Screenshot:
test-artifacts/ui/progress-lines.png.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from .conftest import shot, write_cells
from .test_debug_stdin import run_cell
from .test_live_anywidget import KERNEL_IDLE, cell, save_now

pytestmark = pytest.mark.timeout(400)

NOTEBOOK = "progress-lines.ipynb"
CELLS = [
    "%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu",
    "%%dist\nimport time, torch, torch.distributed as dist\n"
    "if rank == 1:\n    time.sleep(0.5); raise ValueError('boom')\n"
    "dist.all_reduce(torch.ones(1))",
    "print('next')",
]
LINE = re.compile(r"\[\s*\d+\.\d s\] ")


def test_no_cell_keeps_a_progress_line_on_the_page_or_in_the_file(shared_lab, page) -> None:  # type: ignore[no-untyped-def]
    lab = shared_lab
    write_cells(lab.root / NOTEBOOK, CELLS)
    page.goto(lab.lab_url(f"lab/tree/{NOTEBOOK}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
    shows = ["ready in", "boom", "next"]
    for index, text in enumerate(shows):
        page.wait_for_function(KERNEL_IDLE, timeout=60_000)
        run_cell(page, index)
        output = cell(page, index).locator(".jp-OutputArea")
        expect(output).to_contain_text(text, timeout=120_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    for index in range(len(CELLS)):
        shown = cell(page, index).locator(".jp-OutputArea").inner_text()
        assert not LINE.search(shown), (index, shown)
    shot(page, "progress-lines")
    save_now(page)
    saved = json.loads((lab.root / NOTEBOOK).read_text())
    for index, saved_cell in enumerate(saved["cells"]):
        texts = [
            "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
            for o in saved_cell["outputs"]
        ]
        assert not any(LINE.search(t) for t in texts), (index, texts)
    start = saved["cells"][0]["outputs"]
    assert len(start) == 1 and "ready in" in "".join(start[0]["data"]["text/plain"]), start
