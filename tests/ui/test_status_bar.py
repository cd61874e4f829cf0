"""JupyterLab's status bar through a plain (blocking) ``%%dist_train``, as a person sees it:
"Busy" at every sample over the run (the live view's messages, answered on a kernel
subshell, publish busy then idle of their own; uipoll.BlockedCell follows each such idle
by the cell's busy), "Busy" again in a page reloaded mid-run, whose running cell shows
``[*]`` (the labextension asks the kernel which cell runs: extension/src/runningcell.ts),
and "Idle" once the run has ended, the mark gone.

Screenshots (test-artifacts/ui/): status-busy (mid-run), status-reloaded (the reloaded
page, mid-run), status-idle (after the end). The samples go to
test-artifacts/ui/status-bar.json.
"""

from __future__ import annotations

import json
import time

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS, shot, write_cells
from .test_live_anywidget import (
    CELLS,
    KERNEL_IDLE,
    LINE_DRAWN,
    cell,
    command,
    end_run,
    save_now,
    until_ended,
)

pytestmark = pytest.mark.timeout(600)

NOTEBOOK = "status-bar.ipynb"
STEPS = 20000  # at most: the test ends the run once it has sampled the status bar
BLOCKING = f"""%%dist_train --name busy --steps {STEPS}
import time
from dist_notebook import report
for i in range({STEPS}):
    report(step=i, loss=1.0 / (i + 1), samples=8)
    time.sleep(0.03)
"""
# JupyterLab's kernel status item: "Python 3 (ipykernel) | Busy"
STATUS = "#jp-main-statusbar [title^='Change kernel for']"
SAMPLES, EVERY, GLANCE = 10, 0.5, 0.1


def status_text(page) -> str:  # type: ignore[no-untyped-def]
    return page.locator(STATUS).first.inner_text()


def sample(page, n: int = SAMPLES, want: str = "Busy") -> list[str]:  # type: ignore[no-untyped-def]
    """The status bar's kernel status, *n* times, EVERY s apart. A sample that is not
    *want* is read again GLANCE s later, and counts as "X then Y": a subshell's idle and
    the cell's busy after it are two messages (1-5 ms apart, measured), so the bar may
    show the first for a frame; a person never sees that, and a status that stays wrong
    fails the test."""
    seen = []
    for _ in range(n):
        now = status_text(page).rsplit("|", 1)[-1].strip()
        if now != want:
            time.sleep(GLANCE)
            now = f"{now} then {status_text(page).rsplit('|', 1)[-1].strip()}"
        seen.append(now)
        time.sleep(EVERY)
    return seen


def settled(samples: list[str]) -> list[str]:
    """What each sample settled on (a person's reading)."""
    return [s.rsplit(" then ", 1)[-1] for s in samples]


# Every status message the page's kernel connection gets: (ms, state, parent's msg_type).
RECORD = """() => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  window.__dnStatuses = [];
  kernel.iopubMessage.connect((_k, msg) => {
    if (msg.header.msg_type === 'status') {
      window.__dnStatuses.push([Math.round(performance.now()),
        msg.content.execution_state, msg.parent_header.msg_type || '']);
    }
  });
}"""
RECORDED = "() => window.__dnStatuses"


def prompt(page, index: int) -> str:  # type: ignore[no-untyped-def]
    return cell(page, index).locator(".jp-InputPrompt").first.inner_text().strip()


def open_it(page, lab) -> None:  # type: ignore[no-untyped-def]
    page.goto(lab.lab_url(f"lab/tree/{NOTEBOOK}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(3, timeout=60_000)


def test_the_status_bar_says_busy_through_a_blocking_run_and_a_reload(  # type: ignore[no-untyped-def]
    shared_lab, page, tmp_path
):
    lab = shared_lab
    write_cells(lab.root / NOTEBOOK, [*CELLS[:2], until_ended(BLOCKING, tmp_path)])
    open_it(page, lab)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    figures: dict[str, object] = {}
    try:
        command(page, "notebook:run-all-cells")
        live = cell(page, 2).locator(".dn-live")
        expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
            "d", LINE_DRAWN, timeout=120_000
        )
        page.evaluate(RECORD)
        figures["running"] = sample(page)
        figures["running_statuses"] = page.evaluate(RECORDED)
        shot(page, "status-busy")
        assert settled(figures["running"]) == ["Busy"] * SAMPLES, figures

        save_now(page)  # as an autosave: the reloaded page holds the new cell
        page.reload(timeout=90_000)
        open_it(page, lab)
        live = cell(page, 2).locator(".dn-live")
        expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
            "d", LINE_DRAWN, timeout=60_000
        )
        expect(cell(page, 2).locator(".jp-InputPrompt").first).to_have_text("[*]:", timeout=30_000)
        page.evaluate(RECORD)
        figures["reloaded"] = sample(page)
        figures["reloaded_statuses"] = page.evaluate(RECORDED)
        figures["reloaded_prompts"] = [prompt(page, i) for i in range(3)]
        shot(page, "status-reloaded")
        assert settled(figures["reloaded"]) == ["Busy"] * SAMPLES, figures
        assert figures["reloaded_prompts"][2] == "[*]:", figures  # still, after the samples
    finally:
        end_run(tmp_path)
        (ARTIFACTS / "status-bar.json").write_text(json.dumps(figures, indent=1))
    expect(cell(page, 2).locator(".dn-live-final")).to_contain_text(
        "busy: succeeded in", timeout=240_000
    )
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    expect(page.locator(STATUS).first).to_contain_text("Idle", timeout=30_000)
    # the mark ends with the run (the reloaded page never sent the cell: no new count)
    expect(cell(page, 2).locator(".jp-InputPrompt").first).not_to_have_text("[*]:")
    figures["ended"] = sample(page, 4, want="Idle")
    figures["ended_prompt"] = prompt(page, 2)
    shot(page, "status-idle")
    (ARTIFACTS / "status-bar.json").write_text(json.dumps(figures, indent=1))
    assert settled(figures["ended"]) == ["Idle"] * 4, figures
