"""A page reloaded mid-run, in JupyterLab with dist-notebook's labextension, under two
busy processes: the chart comes back with the run's history, the end's picture appears in
the reloaded view, and what that page saves (the labextension turns an ended live view's
output into its picture just before a save) opens without a kernel as the picture, with
no "Loading widget..." and no "model not found"; the file as saved mid-run, opened once
its kernel is gone, shows the kernel's note on the run instead of "model not found".

Screenshots (test-artifacts/ui/): reload-live (the reloaded view mid-run), reload-end (its
end), reload-reopened (the saved file, reopened without a kernel), reload-midrun-file (the
file as saved mid-run, opened once the run's kernel is gone: the note on the run).
"""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS, open_lab, shot, write_cells
from .test_live_anywidget import (
    CELLS,
    KERNEL_IDLE,
    LINE_DRAWN,
    NOTEBOOK,
    cell,
    command,
    cpu_hogs,
    open_notebook,
    read_saved,
    save,
)

expect.set_options(timeout=20_000)

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
MIDRUN = "saved-mid-run.ipynb"


@pytest.mark.timeout(600)
def test_a_reload_mid_run_gets_the_chart_back_and_saves_the_end_as_a_picture(  # type: ignore[no-untyped-def]
    lab, page
):
    write_cells(lab.root / NOTEBOOK, CELLS)
    open_lab(page, lab)  # the labextension is there: its side panel's tab
    open_notebook(page, lab)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    with cpu_hogs():
        command(page, "notebook:run-all-cells")
        live = cell(page, 2).locator(".dn-live")
        expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
            "d", LINE_DRAWN, timeout=120_000
        )
        save(page)  # as an autosave mid-run would: the file holds the live view's output
        saved_mid = read_saved(lab.root / NOTEBOOK)
        mid = saved_mid["cells"][2]["outputs"]
        assert any(WIDGET_MIME in o.get("data", {}) for o in mid), "saved mid-run"
        # kept as it is (the same content: the server trusts it as it trusted this one)
        (lab.root / MIDRUN).write_text(json.dumps(saved_mid))
        page.reload(timeout=90_000)
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
        expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
        live = cell(page, 2).locator(".dn-live")
        expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
            "d", LINE_DRAWN, timeout=10_000
        )
        live.scroll_into_view_if_needed()
        shot(page, "reload-live")
        final = cell(page, 2).locator(".dn-live-final")
        expect(final).to_contain_text("noext: succeeded in", timeout=120_000)
    expect(final.locator("img")).to_be_visible()
    final.scroll_into_view_if_needed()
    shot(page, "reload-end")

    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    save(page)
    outputs = read_saved(lab.root / NOTEBOOK)["cells"][2]["outputs"]
    assert all(WIDGET_MIME not in o.get("data", {}) for o in outputs), outputs
    assert any(
        "data:image/png;base64," in "".join(o.get("data", {}).get("text/html", "")) for o in outputs
    ), outputs
    command(page, "kernelmenu:shutdown")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel",
        timeout=30_000,
    )
    page.reload(timeout=90_000)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
    picture = cell(page, 2).locator(".dist-notebook-run img")
    expect(picture).to_be_visible()
    expect(page.locator(".jp-NotebookPanel")).not_to_contain_text("Loading widget")
    expect(page.locator(".jp-NotebookPanel")).not_to_contain_text("model not found")
    cell(page, 2).locator(".dist-notebook-run").scroll_into_view_if_needed()
    shot(page, "reload-reopened")
    (ARTIFACTS / "reload-saved-outputs.txt").write_text(
        "\n".join(str(sorted(o.get("data", {}))) for o in outputs)
    )

    # The file as the mid-run save left it, opened after the run's kernel is gone (a new
    # kernel starts for it): the live view's output shows the kernel's note on the run.
    # only this file open (the other one's panel would hold the same cells)
    command(page, "application:close-all")
    expect(page.locator(".jp-NotebookPanel")).to_have_count(0)
    command(page, "docmanager:open", {"path": MIDRUN})
    # Its panel by the id JupyterLab gave it: the restored layout may bring the other
    # notebook back in front of it (a hidden tab panel has no role to find it by).
    handle = page.wait_for_function(
        """(name) => { for (const w of window.jupyterapp.shell.widgets('main')) {
             if (w.title.label === name) return w.id; } return null; }""",
        arg=MIDRUN,
        timeout=60_000,
    )
    panel = page.locator(f"[id='{handle.json_value()}']")
    expect(panel.locator(".jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
    # trusted: JupyterLab would pick the widget's renderer over the note by itself
    assert page.evaluate(
        """(name) => { for (const w of window.jupyterapp.shell.widgets('main')) {
             if (w.title.label === name) return w.content.widgets[2].model.trusted; } }""",
        MIDRUN,
    )
    note = panel.locator(".jp-Cell").nth(2).locator(".jp-OutputArea")
    expect(note).to_contain_text("live view of a run in progress", timeout=60_000)
    expect(note).to_contain_text("dist_notebook.load_run('noext')")
    expect(panel).not_to_contain_text("model not found")
    expect(panel).not_to_contain_text("Loading widget")
    for _attempt in range(5):  # in front for the picture, whatever the layout brings back
        page.evaluate(
            """(name) => { for (const w of window.jupyterapp.shell.widgets('main')) {
                 if (w.title.label === name) window.jupyterapp.shell.activateById(w.id); } }""",
            MIDRUN,
        )
        page.wait_for_timeout(500)
        if note.is_visible():
            break
    expect(note).to_be_visible(timeout=10_000)
    note.scroll_into_view_if_needed()
    shot(page, "reload-midrun-file")
