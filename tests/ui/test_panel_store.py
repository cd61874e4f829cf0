"""The panel renders a run written to the store by hand: ranks, live curves, stragglers,
run history, the run tab, and the confirmation and error of Stop."""

from __future__ import annotations

import os
import re
import threading
import time

from playwright.sync_api import expect

from dist_notebook.store import StoreWriter

from .conftest import open_lab, open_panel, shot

CLUSTER = "c-sim"
RUN = "r-sim"
OLD_RUN = "r-old"
STRAGGLER = re.compile(r"\bdn-straggler\b")


def simulate(writer: StoreWriter, steps: range, delay: float = 0.0) -> None:
    """Append one record per rank and step; rank 1 runs at half the speed of rank 0."""
    for step in steps:
        now = time.time()
        writer.append_metrics(
            RUN,
            [
                {
                    "rank": rank,
                    "step": step,
                    "time": now,
                    "loss": 2.0 / (1 + 0.2 * step) + 0.05 * rank,
                    "samples_per_s": 400.0 if rank == 0 else 200.0,
                    "gpu_mem": (1 + rank) * 512 * 1024**2,
                }
                for rank in (0, 1)
            ],
        )
        time.sleep(delay)


def fill(writer: StoreWriter) -> None:
    writer.add_cluster(
        CLUSTER, n=2, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    writer.set_cluster_state(CLUSTER, "ready")
    writer.set_ranks(
        CLUSTER,
        [
            {
                "rank": r,
                "host": "localhost",
                "pid": 1000 + r,
                "device": f"cuda:{r}",
                "state": "running",
            }
            for r in (0, 1)
        ],
    )
    writer.add_run(OLD_RUN, name="warmup", cluster_id=CLUSTER, ranks=[0, 1], steps=3, code="")
    writer.set_run_state(OLD_RUN, "succeeded")
    time.sleep(0.01)
    writer.add_run(RUN, name="simulated", cluster_id=CLUSTER, ranks=[0, 1], steps=60, code="")
    writer.set_run_state(RUN, "running")
    simulate(writer, range(20))


def curve_points(page, rank: int) -> int:  # type: ignore[no-untyped-def]
    path = page.locator(f'#dist-notebook-panel .dn-run-curve path[data-rank="{rank}"]')
    d = path.get_attribute("d")
    return (d or "").count("L") + (d or "").count("M")


def test_panel_renders_a_stored_run(lab, page):  # type: ignore[no-untyped-def]
    writer = StoreWriter(lab.store)
    try:
        fill(writer)
        open_lab(page, lab)
        panel = open_panel(page)

        cluster = panel.locator(f'.dn-cluster[data-cluster-id="{CLUSTER}"]')
        expect(cluster).to_be_visible()
        expect(cluster.locator(".dn-cluster-state")).to_have_text("ready")
        rank0 = cluster.locator('.dn-rank[data-rank="0"]')
        rank1 = cluster.locator('.dn-rank[data-rank="1"]')
        expect(rank0).to_have_attribute("data-state", "running")
        expect(rank0.locator(".dn-rank-device")).to_have_text("cuda:0")
        expect(rank0.locator(".dn-rank-step")).to_have_text("19")
        expect(rank0.locator(".dn-rank-sps")).to_have_text("400")
        expect(rank1.locator(".dn-rank-gpu")).to_have_text("1.0 GiB")
        # rank 1 is a third below the median (300): a straggler, in the table and on the curve
        expect(rank1).to_have_class(STRAGGLER)
        expect(rank0).not_to_have_class(STRAGGLER)
        curve = panel.locator(".dn-run-curve")
        expect(curve.locator("path.dn-curve-line")).to_have_count(2)
        expect(curve.locator('path[data-rank="1"]')).to_have_class(STRAGGLER)
        assert curve_points(page, 0) == 20
        expect(panel.locator(".dn-current-run-title")).to_contain_text("simulated · running")
        shot(page, "store-panel")

        # the curve grows while the run goes on, without reloading anything
        feeder = threading.Thread(target=simulate, args=(writer, range(20, 40), 0.05))
        feeder.start()
        feeder.join()
        expect(rank0.locator(".dn-rank-step")).to_have_text("39", timeout=10_000)
        assert curve_points(page, 1) == 40
        shot(page, "store-panel-live")

        # run history: newest first; a click opens the run's curves in a main-area tab
        items = panel.locator(".dn-run-item")
        expect(items).to_have_count(2)
        expect(items.nth(0)).to_have_attribute("data-run-id", RUN)
        items.nth(0).click()
        view = page.locator(f'.dn-runview[data-run-id="{RUN}"]')
        expect(view).to_be_visible()
        expect(view.locator(".dn-runview-summary")).to_contain_text("simulated")
        expect(view.locator('.dn-curve[data-metric="loss"] path.dn-curve-line')).to_have_count(2)
        expect(view.locator('.dn-curve[data-metric="samples_per_s"]')).to_be_visible()
        shot(page, "store-run-tab")

        # Stop asks first; Cancel does nothing
        cluster.locator(".dn-stop-button").click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text(f"Stop cluster {CLUSTER}")
        shot(page, "store-stop-dialog")
        dialog.locator(".jp-Dialog-button.jp-mod-reject").click()
        expect(dialog).to_have_count(0)
        # its owner (this process) watches no requests: confirming shows the server's reason
        cluster.locator(".dn-stop-button").click()
        page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-warn").click()
        expect(page.locator(".jp-Dialog")).to_contain_text("did not take the stop", timeout=20_000)
        shot(page, "store-stop-error")
        page.locator(".jp-Dialog .jp-Dialog-footer button").last.click()
        expect(page.locator(".jp-Dialog")).to_have_count(0)
        expect(cluster.locator(".dn-cluster-state")).to_have_text("ready")

        # the kernel records the end: the panel follows
        writer.set_cluster_state(CLUSTER, "stopped")
        for r in (0, 1):
            writer.set_rank_state(CLUSTER, r, "dead")
        writer.set_run_state(RUN, "cancelled")
        # a stopped cluster is folded into the history, without buttons
        ended = panel.locator(f'.dn-ended-cluster[data-cluster-id="{CLUSTER}"]')
        expect(ended).to_have_attribute("data-state", "stopped")
        expect(cluster).to_have_count(0)
        expect(items.nth(0).locator(".dn-run-state")).to_have_text("cancelled")
        shot(page, "store-stopped")
    finally:
        writer.close()


def test_panel_without_a_store(lab, page):  # type: ignore[no-untyped-def]
    open_lab(page, lab)
    panel = open_panel(page)
    expect(panel.locator(".dn-empty")).to_contain_text("No cluster yet")
    expect(panel.locator(".dn-error")).to_be_hidden()
    expect(panel.locator(".dn-run-item")).to_have_count(0)
    assert not lab.store.exists()
