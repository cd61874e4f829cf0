"""A page reloaded, and a second tab opened, while a plain (blocking) ``%%dist_train`` holds
the kernel's main shell, under two busy processes, with and without dist-notebook's
labextension: the widget manager's restore requests are answered by the live view's
subshell (``uipoll.RestoreRoute``), so the chart comes back while the cell still runs,
keeps moving, and the end's picture appears in both views.

The time from the page being usable to the chart drawn is written to
test-artifacts/ui/blocking-reload-<mode>.json (the goal is 2 s; the bound here is loose,
the figure is what the note reports). Screenshots: blocking-reload-<mode>-live (the
reloaded view mid-run), blocking-reload-<mode>-end (its end), blocking-tab-<mode>-end (the
second tab's end).
"""

from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS, shot, write_cells
from .test_live_anywidget import (
    CELLS,
    KERNEL_IDLE,
    LINE_DRAWN,
    NOTEBOOK,
    cell,
    command,
    cpu_hogs,
    end_run,
    open_notebook,
    save_now,
    until_ended,
)

expect.set_options(timeout=20_000)

STEPS = 20000  # at most: the test ends the run once both views have shown it moving
BLOCKING = f"""%%dist_train --name blk --steps {STEPS}
import time
from dist_notebook import report
for i in range({STEPS}):
    report(step=i, loss=1.0 / (i + 1), samples=8)
    time.sleep(0.03)
"""
STEP = re.compile(r"step (\d+)/")


def step_of(live) -> int:  # type: ignore[no-untyped-def]
    found = STEP.findall(live.locator(".dn-live-progress").text_content() or "")
    return int(found[0]) if found else -1


def chart_back(page, label: str) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    """Once *page* is usable: seconds until its live chart is drawn, and the view."""
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(3, timeout=60_000)
    usable = time.monotonic()
    live = cell(page, 2).locator(".dn-live")
    expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
        "d", LINE_DRAWN, timeout=30_000
    )
    back = time.monotonic() - usable
    # moving: the header's step goes on while the cell still blocks
    first = step_of(live)
    page.wait_for_function(
        """([sel, step]) => { const el = document.querySelectorAll(sel)[2]
             ?.querySelector('.dn-live-progress');
           const m = /step (\\d+)\\//.exec(el?.textContent || '');
           return m && Number(m[1]) > step + 5; }""",
        arg=[".jp-NotebookPanel .jp-Cell", first],
        timeout=30_000,
    )
    assert "Loading widget" not in (cell(page, 2).text_content() or ""), label
    return back, live


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["labextension", "no-labextension"])
def test_a_reload_and_a_second_tab_during_a_blocking_cell_get_the_chart_back(  # type: ignore[no-untyped-def]
    mode, request, page
):
    lab = request.getfixturevalue("lab" if mode == "labextension" else "lab_without_extension")
    cells = [*CELLS[:2], until_ended(BLOCKING, lab.root)]
    write_cells(lab.root / NOTEBOOK, cells)
    open_notebook(page, lab)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    figures: dict[str, object] = {"mode": mode}
    with cpu_hogs():
        command(page, "notebook:run-all-cells")
        live = cell(page, 2).locator(".dn-live")
        expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
            "d", LINE_DRAWN, timeout=120_000
        )
        # as an autosave: the file holds the live view (written before the reload: a
        # reload that came first loaded the file without outputs, and no live view)
        save_now(page)
        page.reload(timeout=90_000)
        figures["reload_s"], live = chart_back(page, "reloaded")
        figures["step_at_reload_drawn"] = step_of(live)
        live.scroll_into_view_if_needed()
        shot(page, f"blocking-reload-{mode}-live")
        tab = page.context.new_page()
        tab.goto(lab.lab_url(f"lab/tree/{NOTEBOOK}"))
        figures["second_tab_s"], tab_live = chart_back(tab, "second tab")
        assert page.evaluate(
            "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
            ".connectionStatus === 'connected'"
        )
        end_run(lab.root)
        for view, name in ((page, "reload"), (tab, "tab")):
            final = cell(view, 2).locator(".dn-live-final")
            expect(final).to_contain_text("blk: succeeded in", timeout=240_000)
            expect(final.locator("img")).to_be_visible()
            assert "model not found" not in (view.locator(".jp-NotebookPanel").text_content())
            final.scroll_into_view_if_needed()
            shot(view, f"blocking-{name}-{mode}-end")
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    (ARTIFACTS / f"blocking-reload-{mode}.json").write_text(json.dumps(figures, indent=1))
    # Loose: the goal (2 s) is the note's figure; a loaded machine must not fail the test.
    assert figures["reload_s"] < 20, figures  # type: ignore[operator]
    assert figures["second_tab_s"] < 20, figures  # type: ignore[operator]
    tab.close()
