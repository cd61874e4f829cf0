"""A notebook saved mid-run (as an autosave would), in JupyterLab with and without
dist-notebook's labextension, under two busy processes; the page is reloaded after that
save, the run ends, and the file is saved again.

- Mid-run, the file holds the live view's output and a note state for its model (the
  server extension's pre-save hook, ``server/livesave.py``). While the kernel lives, a
  reload gets the live chart back with the run's history (the kernel's model wins over the
  saved state), and the end's picture appears in the reloaded view.
- Saved after the end by that reloaded page (whose output the kernel's display update
  cannot reach): with the labextension the output is the picture (extension/src/
  finalsave.ts); without it, the pre-save hook saved the run's end note ("ended
  (succeeded)", ``load_run(...)``), read from the run store, with no widget view left.
- The mid-run file, reopened once the run's kernel is gone (a new kernel starts for it):
  the run's note, never "Loading widget..." nor "model not found". The server hands it
  out before the page's session exists, so with the run's end note from the run store and
  no widget view (``server/liveload.py``). Reloaded once that session lives, the file
  comes as saved: without the labextension the widget manager draws the saved note state
  (``.dist-notebook-saved-note``), to which the server gave the run's end; with it, the
  labextension sees that the output's kernel is not this one and shows the output's note
  (``.dist-notebook-live-note``).
- Opened with "No Kernel" picked in JupyterLab's kernel dialog, as untrusted copies (the
  edit that makes the dialog ask voids the signature) and trusted ones (signed again with
  the server's own notary): the mid-run file while the run goes shows the output's note
  (the server hands it out so: no session), after the end the end note; the file saved
  after the end its picture or end note. Never a widget error.

Screenshots (test-artifacts/ui/): midrun-live-<mode> (the reloaded view mid-run),
midrun-end-<mode> (its end), midrun-reopened-<mode> and midrun-reopened-session-<mode>
(the mid-run file with a new kernel, then reloaded), nokernel-{midrun,ended}-{trusted,
untrusted}-<mode> and nokernel-midrun-after-end-trusted-<mode> (opened with "No Kernel").
"""

from __future__ import annotations

import time

import nbformat
import pytest
from playwright.sync_api import expect

from dist_notebook.server.livesave import ENDED_CLASS, MARK, WIDGET_STATE
from dist_notebook.store import StoreReader

from .conftest import open_lab, shot, write_cells
from .test_live_anywidget import (
    KERNEL_IDLE,
    LINE_DRAWN,
    NOTEBOOK,
    TRAIN,
    cell,
    command,
    cpu_hogs,
    end_run,
    open_notebook,
    read_saved,
    save_now,
    until_ended,
    wait_for_history,
)

expect.set_options(timeout=20_000)

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def cells(lab) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        "%load_ext dist_notebook",
        "%dist_cluster start -n 2 --cpu",
        until_ended(TRAIN.replace("700", "20000"), lab.root, together=True),
    ]


def panel_of(page, name: str):  # type: ignore[no-untyped-def]
    """The panel of the open file *name*, by the id JupyterLab gave it (a restored layout
    may bring another file back in front of it)."""
    handle = page.wait_for_function(
        """(n) => { for (const w of window.jupyterapp.shell.widgets('main')) {
             if (w.title.label === n) return w.id; } return null; }""",
        arg=name,
        timeout=60_000,
    )
    page.evaluate("(id) => window.jupyterapp.shell.activateById(id)", handle.json_value())
    panel = page.locator(f"[id='{handle.json_value()}']")
    expect(panel.locator(".jp-Cell")).to_have_count(3, timeout=60_000)
    return panel


def trusted(page, name: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether JupyterLab trusts the live view's cell of the open file *name*."""
    return bool(
        page.evaluate(
            """(n) => { for (const w of window.jupyterapp.shell.widgets('main')) {
                 if (w.title.label === n) return w.content.widgets[2].model.trusted; } }""",
            name,
        )
    )


def run_state(lab, name: str) -> str | None:  # type: ignore[no-untyped-def]
    reader = StoreReader(lab.store)
    try:
        row = reader.find_run(name)
    finally:
        reader.close()
    return None if row is None else str(row["state"])


def open_without_kernel(page, lab, name: str, signed: bool):  # type: ignore[no-untyped-def]
    """Open *name* as a user does who picks "No Kernel" in JupyterLab's kernel dialog (the
    file names a kernel this server lacks, so the dialog asks); its panel's locator. That
    edit voids the file's signature; *signed*: signed again as the server would (its
    notary: the same data dir, secret and database, as the test shares its environment)."""
    path = lab.root / name
    nb = nbformat.read(path, as_version=4)
    # no kernel of that name nor of its language: JupyterLab asks (else it picks python3)
    nb.metadata["kernelspec"] = {"name": "dn-absent", "display_name": "absent"}
    nb.metadata.pop("language_info", None)
    if signed:
        from nbformat.sign import NotebookNotary

        NotebookNotary().sign(nb)
    nbformat.write(nb, path)
    page.evaluate(
        "(p) => { void window.jupyterapp.commands.execute('docmanager:open', {path: p}); }", name
    )
    dialog = page.locator(".jp-Dialog:has(select)")  # the kernel dialog, not another one
    expect(dialog).to_be_visible(timeout=60_000)
    dialog.locator("select").select_option(label="No Kernel")
    dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
    expect(dialog).to_have_count(0, timeout=30_000)
    panel = panel_of(page, name)
    assert trusted(page, name) is signed
    kernel = page.evaluate(
        """(n) => { for (const w of window.jupyterapp.shell.widgets('main')) {
             if (w.title.label === n) return w.sessionContext.session?.kernel?.name ?? null; } }""",
        name,
    )
    assert kernel is None, kernel
    return panel


def no_widget_error(page, panel) -> None:  # type: ignore[no-untyped-def]
    """Neither "Loading widget..." nor "model not found", in this panel or any other."""
    expect(panel).not_to_contain_text("Loading widget", timeout=10_000)
    expect(page.locator("body")).not_to_contain_text("Loading widget")
    expect(page.locator("body")).not_to_contain_text("model not found")


def copies_without_kernel(page, lab, source: str, signs: tuple[bool, ...]):  # type: ignore[no-untyped-def]
    """Copies of *source*, untrusted and/or trusted (*signs*), opened with "No Kernel" one
    after the other: each one's live-view cell, panel and trust, while it is in front."""
    for signed in signs:
        trust = "trusted" if signed else "untrusted"
        name = f"nokernel-{source.split('.')[0]}-{trust}.ipynb"
        (lab.root / name).write_text((lab.root / source).read_text())
        panel = open_without_kernel(page, lab, name, signed)
        yield panel.locator(".jp-Cell").nth(2), panel, trust


def midrun_without_kernel(page, lab, mode: str) -> None:  # type: ignore[no-untyped-def]
    """While the run goes, the mid-run file opened with "No Kernel" (no session: the server
    hands it out as the output's note, as jupyterlab_widgets 3.0.17 never restores a widget
    without a kernel: its restoreWidgets throws "Kernel not set", and a widget view would
    say "Loading widget..." for good). In a second tab with a workspace of its own, so
    that the run's page and its layout are left as they are."""
    other = page.context.new_page()
    try:
        other.goto(lab.lab_url("lab/workspaces/nokernel"))
        other.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
        other.wait_for_function("() => window.jupyterapp?.restored !== undefined", timeout=60_000)
        other.evaluate("() => window.jupyterapp.restored.then(() => true)")
        for out, panel, trust in copies_without_kernel(other, lab, "mid.ipynb", (False, True)):
            note = out.locator(".dist-notebook-live-note")
            expect(note).to_contain_text("dist_notebook.load_run('noext')", timeout=60_000)
            expect(note).to_contain_text("live view of a run in progress")
            no_widget_error(other, panel)
            note.scroll_into_view_if_needed()
            shot(other, f"nokernel-midrun-{trust}-{mode}")
    finally:
        other.close()


def ended_without_kernel(page, lab, mode: str, pictured: bool) -> None:  # type: ignore[no-untyped-def]
    """After the end, with "No Kernel": the file saved then shows its picture or end note,
    and the trusted mid-run file the end note the server hands out (from the run store)."""
    for out, panel, trust in copies_without_kernel(page, lab, "ended.ipynb", (False, True)):
        shown = out.locator(".dist-notebook-run img" if pictured else f".{ENDED_CLASS}")
        expect(shown).to_be_visible(timeout=60_000)
        if not pictured:
            expect(shown).to_contain_text("ended (succeeded)")
            expect(shown).to_contain_text("dist_notebook.load_run('noext')")
        no_widget_error(page, panel)
        shown.scroll_into_view_if_needed()
        shot(page, f"nokernel-ended-{trust}-{mode}")
    [(out, panel, _trust)] = list(copies_without_kernel(page, lab, "mid.ipynb", (True,)))
    shown = out.locator(f".{ENDED_CLASS}")
    expect(shown).to_contain_text("ended (succeeded)", timeout=60_000)
    expect(shown).to_contain_text("dist_notebook.load_run('noext')")
    no_widget_error(page, panel)
    shot(page, f"nokernel-midrun-after-end-trusted-{mode}")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["labextension", "no-labextension"])
def test_a_file_saved_mid_run_reopens_as_the_runs_note(  # type: ignore[no-untyped-def]
    mode, request, page
):
    lab = request.getfixturevalue("lab" if mode == "labextension" else "lab_without_extension")
    write_cells(lab.root / NOTEBOOK, cells(lab))
    if mode == "labextension":
        open_lab(page, lab)  # the labextension is there: its side panel's tab
    open_notebook(page, lab)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    with cpu_hogs():
        command(page, "notebook:run-all-cells")
        live = cell(page, 2).locator(".dn-live")
        expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
            "d", LINE_DRAWN, timeout=120_000
        )
        save_now(page)  # as an autosave mid-run would
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
        # the file as saved mid-run, kept as it is (the server trusts it as it did this one)
        (lab.root / "mid.ipynb").write_text((lab.root / NOTEBOOK).read_text())
        midrun_without_kernel(page, lab, mode)

        # while the kernel lives, a reload gets the live chart back, with the run's
        # history (its first steps drawn again), not the saved note
        step = int(live.locator(".dn-live-progress").text_content().split("step ")[1].split("/")[0])
        page.reload(timeout=90_000)
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
        expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(3, timeout=60_000)
        wait_for_history(page, step)
        expect(cell(page, 2).locator(".dist-notebook-saved-note")).to_have_count(0)
        assert run_state(lab, "noext") == "running"
        cell(page, 2).locator(".dn-live").scroll_into_view_if_needed()
        shot(page, f"midrun-live-{mode}")
        # the run ends: the reloaded view shows the end's picture (the `final` trait)
        end_run(lab.root)
        final = cell(page, 2).locator(".dn-live-final")
        expect(final).to_contain_text("noext: succeeded in", timeout=120_000)
    expect(final.locator("img")).to_be_visible()
    expect(cell(page, 2).locator("svg.dn-chart-svg")).to_be_hidden()
    final.scroll_into_view_if_needed()
    shot(page, f"midrun-end-{mode}")

    # saved after the end: the picture (labextension) or the end's note (the server's
    # hook, from the run store's state), and no widget view in either
    deadline = time.monotonic() + 60
    while run_state(lab, "noext") != "succeeded":
        assert time.monotonic() < deadline, run_state(lab, "noext")
        time.sleep(0.2)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    save_now(page)
    ended = read_saved(lab.root / NOTEBOOK)["cells"][2]["outputs"]
    assert all(WIDGET_MIME not in o.get("data", {}) for o in ended), ended
    markup = "".join("".join(o.get("data", {}).get("text/html", "")) for o in ended)
    pictured = mode == "labextension"
    if pictured:
        assert "data:image/png;base64," in markup, ended
    else:
        assert ENDED_CLASS in markup and "data-state='succeeded'" in markup, ended
    (lab.root / "ended.ipynb").write_text((lab.root / NOTEBOOK).read_text())

    # the run's kernel goes; the file as saved mid-run is opened again (a new kernel)
    command(page, "kernelmenu:shutdown")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel",
        timeout=30_000,
    )
    command(page, "application:close-all")
    expect(page.locator(".jp-NotebookPanel")).to_have_count(0)
    page.goto(lab.lab_url("lab/tree/mid.ipynb"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    panel = panel_of(page, "mid.ipynb")
    assert trusted(page, "mid.ipynb")
    # handed out before the page's session existed: the run's end note (the store says
    # it ended), with no widget view
    note = panel.locator(".jp-Cell").nth(2).locator(f".{ENDED_CLASS}")
    expect(note).to_contain_text("ended (succeeded)", timeout=60_000)
    expect(note).to_contain_text("dist_notebook.load_run('noext')")
    no_widget_error(page, panel)
    note.scroll_into_view_if_needed()
    shot(page, f"midrun-reopened-{mode}")
    # reloaded once its new kernel's session lives: the file as saved, with the widget's
    # view, whose model that kernel lacks; the saved note state or the labextension's note
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    page.reload(timeout=90_000)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    panel = panel_of(page, "mid.ipynb")
    # (the server gave the saved state the run's end: the store says it ended)
    shown = "dist-notebook-live-note" if mode == "labextension" else "dist-notebook-saved-note"
    said = "live view of a run in progress" if mode == "labextension" else "ended (succeeded)"
    note = panel.locator(".jp-Cell").nth(2).locator(f".{shown}")
    expect(note).to_contain_text(said, timeout=60_000)
    expect(note).to_contain_text("dist_notebook.load_run('noext')")
    no_widget_error(page, panel)
    shot(page, f"midrun-reopened-session-{mode}")
    command(page, "kernelmenu:shutdown")  # the files below are opened beside it

    ended_without_kernel(page, lab, mode, pictured)
