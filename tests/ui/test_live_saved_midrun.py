"""A notebook saved mid-run (as an autosave would) in JupyterLab without dist-notebook's
labextension, opened again once the run's kernel is gone: the live view's output shows the
run's note (its name and ``load_run(...)``), not "Loading widget..." nor "model not found".
The server extension's pre-save hook (``server/livesave.py``) put a note state for the
live view's model into the file's widget metadata; the widget manager draws it where the
kernel has no such model. Before the kernel goes, a reload still gets the live chart (the
kernel's model wins over the saved state).

Screenshot (test-artifacts/ui/): noext-midrun-reopened (the file reopened after its kernel
was shut down).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from dist_notebook.server.livesave import MARK, WIDGET_STATE

from .conftest import shot, write_cells
from .test_live_anywidget import (
    KERNEL_IDLE,
    LINE_DRAWN,
    NOTEBOOK,
    TRAIN,
    cell,
    command,
    open_notebook,
    read_saved,
    save,
)

expect.set_options(timeout=20_000)

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# long enough that a reload under load still finds it running
CELLS = ["%load_ext dist_notebook", "%dist_cluster start -n 2 --cpu", TRAIN.replace("700", "3000")]


@pytest.mark.timeout(600)
def test_a_file_saved_mid_run_reopens_as_the_runs_note_without_the_labextension(  # type: ignore[no-untyped-def]
    lab_without_extension, page
):
    lab = lab_without_extension
    write_cells(lab.root / NOTEBOOK, CELLS)
    open_notebook(page, lab)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    command(page, "notebook:run-all-cells")
    live = cell(page, 2).locator(".dn-live")
    expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
        "d", LINE_DRAWN, timeout=120_000
    )
    save(page)
    saved = read_saved(lab.root / NOTEBOOK)
    views = [
        o["data"][WIDGET_MIME]["model_id"]
        for o in saved["cells"][2]["outputs"]
        if WIDGET_MIME in o.get("data", {})
    ]
    assert len(views) == 1, saved["cells"][2]["outputs"]
    states = saved["metadata"]["widgets"][WIDGET_STATE]["state"]
    assert states[views[0]][MARK] is True
    assert "load_run('noext')" in states[views[0]]["state"]["note"]

    # while the kernel lives, a reload gets the live chart, not the saved note
    page.reload(timeout=90_000)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    live = cell(page, 2).locator(".dn-live")
    expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
        "d", LINE_DRAWN, timeout=30_000
    )
    expect(cell(page, 2).locator(".dist-notebook-saved-note")).to_have_count(0)

    # the run's kernel goes; the file as saved mid-run is opened again
    (lab.root / "mid.ipynb").write_text((lab.root / NOTEBOOK).read_text())
    command(page, "kernelmenu:shutdown")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel",
        timeout=30_000,
    )
    command(page, "application:close-all")
    expect(page.locator(".jp-NotebookPanel")).to_have_count(0)
    page.goto(lab.lab_url("lab/tree/mid.ipynb"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    # its panel by the id JupyterLab gave it (the restored layout reopens the other file too)
    handle = page.wait_for_function(
        """() => { for (const w of window.jupyterapp.shell.widgets('main')) {
             if (w.title.label === 'mid.ipynb') return w.id; } return null; }""",
        timeout=60_000,
    )
    panel = page.locator(f"[id='{handle.json_value()}']")
    expect(panel.locator(".jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
    assert page.evaluate(  # trusted: JupyterLab picks the widget's renderer, not the HTML
        """() => { for (const w of window.jupyterapp.shell.widgets('main')) {
             if (w.title.label === 'mid.ipynb') return w.content.widgets[2].model.trusted; } }"""
    )
    note = panel.locator(".jp-Cell").nth(2).locator(".dist-notebook-saved-note")
    expect(note).to_contain_text("live view of a run in progress", timeout=60_000)
    expect(note).to_contain_text("dist_notebook.load_run('noext')")
    # in every open file (the other one is the same mid-run save)
    expect(page.locator("body")).not_to_contain_text("Loading widget")
    expect(page.locator("body")).not_to_contain_text("model not found")
    page.evaluate(
        """() => { for (const w of window.jupyterapp.shell.widgets('main')) {
             if (w.title.label === 'mid.ipynb') window.jupyterapp.shell.activateById(w.id); } }"""
    )
    expect(note).to_be_visible(timeout=10_000)
    note.scroll_into_view_if_needed()
    shot(page, "noext-midrun-reopened")
