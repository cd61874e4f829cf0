"""The cell's live view without dist-notebook's labextension (what VS Code, Colab and a hub
whose server lacks it amount to): the anywidget module the kernel ships draws the chart,
a page reloaded mid-run gets the chart back with the whole history, and the end's picture
appears in that reloaded view, which the kernel's display update cannot reach, and what
that page saves names the run for readers without widgets.

Screenshots (test-artifacts/ui/): noext-running (the page, mid-run), noext-running-view
(the cell's view), noext-reloaded (after the reload, mid-run), noext-final (the reloaded
view at the end), noext-final-dark (the same in JupyterLab Dark), noext-narrow-view (the
chart after the window narrowed).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS, PANEL_TAB, shot, write_cells

expect.set_options(timeout=20_000)

NOTEBOOK = "no-extension.ipynb"
# In the background: the kernel stays idle, so a reloaded page restores the widget at once.
TRAIN = """%%dist_train --background --name noext --steps 700
import time
import torch, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from dist_notebook import report
model = DDP(nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(700):
    x = torch.randn(64, 16)
    loss = (model(x) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    report(step=i, loss=loss, samples=64)
    time.sleep(0.03)
"""
CELLS = ["%load_ext dist_notebook", "%dist_cluster start -n 2 --cpu", TRAIN]
# A run that goes until the test ends it: the test writes END_FILE into the server's root
# (end_run), which each rank looks for at every step, so no test waits out steps it has
# no more use for, and none races the run's end under load.
END_FILE = "end-the-run"


def until_ended(train: str, root: Path, together: bool = False) -> str:
    """*train* (a cell whose loop ends with ``    time.sleep(0.03)``) made to end once
    end_run(*root*) is called; *together*: the ranks decide with an all_reduce (a DDP
    loop: a rank that stopped alone would leave the others in DDP's next all_reduce)."""
    path = repr(str(root / END_FILE))
    if together:
        check = (
            f"    end = torch.tensor([float(os.path.exists({path}))])\n"
            "    torch.distributed.all_reduce(end, op=torch.distributed.ReduceOp.MAX)\n"
            "    if end.item():\n        break\n"
        )
    else:
        check = f"    if os.path.exists({path}):\n        break\n"
    sleep = "    time.sleep(0.03)\n"
    assert train.count(sleep) == 1 and "import time\n" in train, train
    return train.replace(sleep, check + sleep).replace("import time\n", "import os, time\n", 1)


def end_run(root: Path) -> None:
    (root / END_FILE).write_text("")


KERNEL_IDLE = (
    "() => window.jupyterapp.shell.currentWidget"
    "?.sessionContext?.session?.kernel?.status === 'idle'"
)
WATCH = "window.__dnLiveLog = [];"
LINE_DRAWN = re.compile(r"^M.+L.+")


def cell(page, index: int):  # type: ignore[no-untyped-def]
    return page.locator(".jp-NotebookPanel .jp-Cell").nth(index)


def open_notebook(page, lab) -> float:  # type: ignore[no-untyped-def]
    """Open the notebook; the time (monotonic) the page became usable."""
    page.goto(lab.lab_url(f"lab/tree/{NOTEBOOK}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
    return time.monotonic()


def command(page, name: str, args: dict | None = None) -> None:  # type: ignore[no-untyped-def]
    page.evaluate(
        "([name, args]) => { void window.jupyterapp.commands.execute(name, args); }",
        [name, args or {}],
    )


def save(page) -> None:  # type: ignore[no-untyped-def]
    command(page, "docmanager:save")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000
    )


def save_now(page) -> None:  # type: ignore[no-untyped-def]
    """Save the current notebook and return once the server has written it (a page whose
    model is not dirty, as a reloaded one after the run's end, would pass save()'s wait
    before the write)."""
    page.evaluate("async () => { await window.jupyterapp.shell.currentWidget.context.save(); }")


Y_LABELS = """(view) => Array.from(
  view.querySelectorAll("g.dn-chart-tick[data-key^='y'] text")).map(t => t.textContent)"""


def wait_for_history(page, step: int) -> None:  # type: ignore[no-untyped-def]
    """Wait until rank 0's line in the live view has the run's history drawn again after a
    reload (half the points of its first *step* steps, at most 50), not only what came
    after it."""
    page.wait_for_function(
        """(want) => {
          const path = document.querySelector(".dn-live path.dn-chart-line[data-rank='0']");
          const d = path ? path.getAttribute('d') || '' : '';
          return d.split(/[ML]/).filter(Boolean).length >= want;
        }""",
        arg=min(step, 100) // 2,
        timeout=30_000,
    )


def decimals(label: str) -> int:
    return len(label.split(".")[1]) if "." in label else 0


def check_axes_and_resize(page, live) -> None:  # type: ignore[no-untyped-def]
    """At least 3 y labels in one format, linear and log; the chart follows its width."""
    for log in (False, True):
        if log:
            live.locator("input.dn-chart-log").check()
            page.wait_for_timeout(300)
        labels = live.evaluate(Y_LABELS)
        assert len(labels) >= 3, (log, labels)
        assert len({decimals(x) for x in labels}) == 1, (log, labels)
    live.locator("input.dn-chart-log").uncheck()
    width = """(view) => [Number(view.querySelector('svg.dn-chart-svg').getAttribute('width')),
        view.querySelector('.dn-chart-plot').clientWidth]"""
    before = live.evaluate(width)
    assert abs(before[0] - before[1]) <= 2, before
    page.set_viewport_size({"width": 900, "height": 900})
    page.wait_for_function(
        f"""() => {{ const view = document.querySelector('.dn-live');
          const [svg, plot] = ({width})(view);
          return svg < {before[0] - 200} && Math.abs(svg - plot) <= 2; }}""",
        timeout=10_000,
    )
    live.screenshot(path=str(ARTIFACTS / "noext-narrow-view.png"))
    page.set_viewport_size({"width": 1440, "height": 900})
    page.wait_for_function(
        f"""() => {{ const [svg] = ({width})(document.querySelector('.dn-live'));
          return svg >= {before[0] - 2}; }}""",
        timeout=10_000,
    )


def read_saved(path: Path) -> dict:
    """The notebook file as the server wrote it (a read during its write sees it empty)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.timeout(600)
def test_without_the_labextension_the_chart_draws_and_a_reload_gets_it_back(  # type: ignore[no-untyped-def]
    lab_without_extension, page
):
    lab = lab_without_extension
    # goes until the reloaded view has shown it (end_run below)
    train = until_ended(TRAIN.replace("700", "20000"), lab.root, together=True)
    write_cells(lab.root / NOTEBOOK, [*CELLS[:2], train])
    page.add_init_script(WATCH)
    open_notebook(page, lab)
    # the labextension is off: no side panel, and nothing of ours registered a widget
    expect(page.locator(PANEL_TAB)).to_have_count(0)
    assert not page.evaluate("() => window.jupyterapp.hasPlugin('dist-notebook:plugin')")
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    command(page, "notebook:run-all-cells")

    # mid-run: the anywidget draws both ranks and the header moves
    live = cell(page, 2).locator(".dn-live")
    expect(live).to_be_visible(timeout=120_000)
    expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
        "d", LINE_DRAWN, timeout=30_000
    )
    expect(live.locator(".dn-live-progress")).to_contain_text("step", timeout=30_000)
    first = live.locator(".dn-live-progress").text_content()
    expect(live.locator(".dn-live-progress")).not_to_have_text(first or "", timeout=10_000)
    live.scroll_into_view_if_needed()
    shot(page, "noext-running")
    live.screenshot(path=str(ARTIFACTS / "noext-running-view.png"))
    draws = page.evaluate("() => window.__dnLiveLog.filter(d => d.latencies.length).length")
    assert draws >= 3, f"the chart drew {draws} times while the run went"
    check_axes_and_resize(page, live)

    # reload mid-run after a save: the chart comes back with the run's history
    save(page)
    step_before = int(
        re.findall(r"step (\d+)/", live.locator(".dn-live-progress").text_content() or "")[0]
    )
    page.reload()
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(len(CELLS), timeout=60_000)
    usable = time.monotonic()
    # the history, not only what came after the reload: the first steps are drawn again
    wait_for_history(page, step_before)
    back = time.monotonic() - usable
    (ARTIFACTS / "noext-reload-seconds.txt").write_text(f"{back:.2f}\n")
    live = cell(page, 2).locator(".dn-live")
    assert back < 10, f"the chart came back {back:.1f} s after the page was usable"
    expect(page.locator(".jp-NotebookPanel")).not_to_contain_text("model not found")
    live.scroll_into_view_if_needed()
    shot(page, "noext-reloaded")
    end_run(lab.root)

    # the end: the reloaded view shows the final picture (the widget's `final` trait)
    final = cell(page, 2).locator(".dn-live-final img")
    expect(final).to_be_visible(timeout=120_000)
    expect(cell(page, 2).locator(".dn-live-final")).to_contain_text("noext: succeeded in")
    expect(cell(page, 2).locator("svg.dn-chart-svg")).to_be_hidden()
    expect(cell(page, 2).locator(".dn-live-header")).to_be_hidden()  # the picture has one
    cell(page, 2).locator(".dn-live").scroll_into_view_if_needed()
    shot(page, "noext-final")
    # the picture is transparent (it reads on the dark theme): a corner pixel's alpha
    alpha = final.evaluate(
        """(img) => { const c = document.createElement('canvas');
          c.width = img.naturalWidth; c.height = img.naturalHeight;
          const g = c.getContext('2d'); g.drawImage(img, 0, 0);
          return g.getImageData(1, 1, 1, 1).data[3]; }"""
    )
    assert alpha == 0, alpha
    command(page, "apputils:change-theme", {"theme": "JupyterLab Dark"})
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    page.wait_for_timeout(500)
    cell(page, 2).locator(".dn-live").screenshot(path=str(ARTIFACTS / "noext-final-dark.png"))

    # A page reloaded mid-run holds the widget's output from the file (the kernel's
    # display update cannot reach it): what it saves names the run for every reader
    # without widgets, here nbconvert's HTML (as GitHub and nbviewer render it).
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    save(page)
    saved = read_saved(lab.root / NOTEBOOK)
    outputs = saved["cells"][2]["outputs"]
    (ARTIFACTS / "noext-saved-outputs.json").write_text(
        json.dumps([sorted(o.get("data", {})) for o in outputs])
    )
    notes = ["".join(o["data"]["text/html"]) for o in outputs if "text/html" in o.get("data", {})]
    assert any("load_run(&#x27;noext&#x27;)" in n for n in notes), notes
    from nbconvert import HTMLExporter

    page_html, _ = HTMLExporter().from_filename(str(lab.root / NOTEBOOK))
    assert re.search(r"dist_notebook\.load_run\((&#x27;|')noext(&#x27;|')\)", page_html)
    assert "model not found" not in page_html


BLOCKING = """%%dist_train --name blk --steps 400
import time
from dist_notebook import report
for i in range(400):
    report(step=i, loss=1.0 / (i + 1), samples=8)
    time.sleep(0.03)
"""


@contextlib.contextmanager
def cpu_hogs(n: int = 2) -> Iterator[None]:
    """*n* busy processes beside the ranks, as on a loaded 2-core machine."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(timeout=10)


@pytest.mark.timeout(600)
def test_a_page_reloaded_while_a_plain_cell_trains_shows_the_end(  # type: ignore[no-untyped-def]
    lab_without_extension, page
):
    # A plain (blocking) cell holds the kernel's main shell, where the widget manager of a
    # reloaded page asks for the widgets: it gets them once the cell has ended. The view
    # then shows the end's picture (the widget stays open for it, its comm routed back to
    # the main shell), never "Loading widget..." for good nor "model not found".
    lab = lab_without_extension
    cells = [*CELLS[:2], BLOCKING]
    write_cells(lab.root / NOTEBOOK, cells)
    open_notebook(page, lab)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    with cpu_hogs():
        command(page, "notebook:run-all-cells")
        live = cell(page, 2).locator(".dn-live")
        expect(live.locator("path.dn-chart-line[data-rank='1']")).to_have_attribute(
            "d", LINE_DRAWN, timeout=120_000
        )
        save(page)
        page.reload()
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
        expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(3, timeout=60_000)
        final = cell(page, 2).locator(".dn-live-final")
        expect(final).to_contain_text("blk: succeeded in", timeout=120_000)
    expect(final.locator("img")).to_be_visible()
    expect(cell(page, 2)).not_to_contain_text("Loading widget")
    expect(page.locator(".jp-NotebookPanel")).not_to_contain_text("model not found")
    cell(page, 2).scroll_into_view_if_needed()
    shot(page, "noext-blocking-reloaded-end")
