"""The panel and the kernel tell one story, in a real JupyterLab with a real kernel.

A store already holds months of history (200 runs, 50 stopped clusters). A notebook
starts a cluster and runs two blocking ``%%dist_train`` cells one after the other:
Interrupt in the panel cancels the first run and the cluster stays ready (the second
cell runs on it); Stop in the panel cancels the second run and stops the cluster as
``%dist_cluster stop`` would, and the next cell's ``%dist_cluster start`` works. All
along, the live cluster and the current run are at the top of the panel, the stopped
clusters folded below the runs. Timings go to test-artifacts/ui/panel-actions.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from playwright.sync_api import expect

from dist_notebook.protocol import Record
from dist_notebook.store import StoreWriter

from .conftest import ARTIFACTS, PANEL_TAB, shot, write_cells

pytestmark = pytest.mark.timeout(600)

NOTEBOOK = "actions.ipynb"
TRAIN = """%%dist_train --name {name} --steps 900 --no-dashboard
import time
for step in range(900):
    report(step=step, loss=1.0 / (step + 1), samples=32)
    time.sleep(0.1)
"""
CELLS = [
    "%load_ext dist_notebook",
    "%dist_cluster start -n 2 --cpu",
    TRAIN.format(name="ui-interrupt"),
    TRAIN.format(name="ui-stop"),
    "%dist_cluster start -n 2 --cpu",
    "%dist_cluster status",
]
KERNEL_IDLE = (
    "() => window.jupyterapp.shell.currentWidget"
    "?.sessionContext?.session?.kernel?.status === 'idle'"
)
RUNS, STOPPED = 200, 50
DAY = 86400.0


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def fill_history(store) -> None:  # type: ignore[no-untyped-def]
    """Three months of use: 50 stopped clusters, 200 ended runs with a few records each."""
    writer = StoreWriter(store)
    pid = dead_pid()
    start = time.time() - 90 * DAY
    for c in range(STOPPED):
        cid = f"old{c:03d}"
        writer.add_cluster(
            cid, n=2, backend="gloo", kernel_pid=pid, profile_dir="", ipp_cluster_id=""
        )
        writer._write("UPDATE clusters SET started = ? WHERE id = ?", (start + c * DAY, cid))
        writer.set_cluster_state(cid, "ready")
        writer.set_cluster_state(cid, "stopped")
    for i in range(RUNS):
        rid, cid = f"old-run-{i:03d}", f"old{i % STOPPED:03d}"
        writer.add_run(rid, name=f"sweep-{i:03d}", cluster_id=cid, ranks=[0, 1], steps=10, code="")
        writer._write("UPDATE runs SET started = ? WHERE id = ?", (start + i * DAY / 3, rid))
        writer.append_metrics(
            rid,
            [
                Record(rank=r, step=s, time=start + s, samples=32.0, metrics={"loss": 1 / (s + 1)})
                for s in range(10)
                for r in (0, 1)
            ],
        )
        writer.set_run_state(rid, "running")
        writer.set_run_state(rid, "succeeded" if i % 7 else "failed")
    writer.close()


def write_notebook(lab) -> None:  # type: ignore[no-untyped-def]
    write_cells(lab.root / NOTEBOOK, CELLS)


def act(page, cluster, button: str) -> None:  # type: ignore[no-untyped-def]
    cluster.locator(button).click()
    page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-warn").click()
    expect(page.locator(".jp-Dialog")).to_have_count(0, timeout=90_000)


def run_state(panel, name: str):  # type: ignore[no-untyped-def]
    return panel.locator(".dn-run-item", has_text=name).first


def test_stop_and_interrupt_through_the_kernel_at_scale(lab, page) -> None:  # type: ignore[no-untyped-def]
    timings: dict[str, float] = {}
    fill_history(lab.store)
    write_notebook(lab)
    page.goto(lab.lab_url(f"lab/tree/{NOTEBOOK}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    page.wait_for_selector(PANEL_TAB)

    # First render of months of history, timed from the click on the panel's tab.
    t0 = time.monotonic()
    page.click(PANEL_TAB)
    panel = page.locator("#dist-notebook-panel")
    expect(panel.locator(".dn-cluster-history-title")).to_have_text(
        f"History: {STOPPED} stopped clusters", timeout=30_000
    )
    expect(panel.locator(".dn-run-count")).to_contain_text(f"of {RUNS} runs")
    timings["first_render_s"] = time.monotonic() - t0
    expect(panel.locator(".dn-cluster")).to_have_count(0)  # no live cluster: no buttons
    expect(panel.locator(".dn-ended-cluster").first).to_be_hidden()  # folded
    shot(page, "panel-actions-history")

    page.wait_for_function(KERNEL_IDLE, timeout=90_000)
    # Not awaited: the command's promise resolves only when every cell has run.
    page.evaluate("() => { void window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

    # The live cluster comes first, with the running run right under it.
    cluster = panel.locator(".dn-cluster").first
    expect(cluster).to_be_visible(timeout=120_000)
    shot(page, "panel-actions-starting")
    expect(cluster).to_have_attribute("data-state", "ready", timeout=180_000)
    expect(panel.locator(".dn-current-run-title")).to_contain_text(
        "ui-interrupt · running", timeout=120_000
    )
    top = page.evaluate(
        "() => [...document.querySelectorAll('#dist-notebook-panel section, "
        "#dist-notebook-panel details')].filter(n => !n.hidden).map(n => n.className)"
    )
    assert top[:2] == ["dn-clusters-section", "dn-current-run"], top
    shot(page, "panel-actions-running")

    # Interrupt: the kernel cancels the run; the same cluster runs the next cell.
    t0 = time.monotonic()
    act(page, cluster, ".dn-interrupt-button")
    expect(run_state(panel, "ui-interrupt")).to_have_attribute(
        "data-state", "cancelled", timeout=90_000
    )
    timings["interrupt_to_cancelled_s"] = time.monotonic() - t0
    expect(panel.locator(".dn-current-run-title")).to_contain_text(
        "ui-stop · running", timeout=120_000
    )
    expect(cluster).to_have_attribute("data-state", "ready")
    shot(page, "panel-actions-interrupted")

    # Stop: the run is cancelled, the cluster stopped and folded into the history.
    stopped_id = cluster.get_attribute("data-cluster-id")
    t0 = time.monotonic()
    act(page, cluster, ".dn-stop-button")
    expect(run_state(panel, "ui-stop")).to_have_attribute("data-state", "cancelled", timeout=90_000)
    expect(panel.locator(f'.dn-ended-cluster[data-cluster-id="{stopped_id}"]')).to_have_attribute(
        "data-state", "stopped", timeout=60_000
    )
    timings["stop_to_stopped_s"] = time.monotonic() - t0

    # The kernel agrees: the next %dist_cluster start worked, and status says ready.
    new = panel.locator(".dn-cluster").first
    expect(new).to_have_attribute("data-state", "ready", timeout=180_000)
    assert new.get_attribute("data-cluster-id") != stopped_id
    last = page.locator(".jp-NotebookPanel .jp-Cell").nth(len(CELLS) - 1)
    expect(last.locator(".jp-OutputArea-output")).to_contain_text(": ready", timeout=60_000)
    outputs = page.locator(".jp-NotebookPanel .jp-OutputArea-output").all_inner_texts()
    assert not any("a cluster is already" in text for text in outputs), outputs
    shot(page, "panel-actions-restarted")

    # Narrow panel: the rank table keeps every column (it scrolls instead of cutting).
    page.set_viewport_size({"width": 900, "height": 900})
    shot(page, "panel-actions-narrow")
    page.evaluate("() => window.jupyterapp.commands.execute('dist-notebook:refresh')")
    (ARTIFACTS / "panel-actions.json").write_text(json.dumps(timings, indent=2))
    print("timings", timings)
