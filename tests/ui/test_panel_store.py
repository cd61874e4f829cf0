"""The run tab draws a run that the real run-store writer recorded, with the fields and
states the kernel writes: the shared chart's per-rank curves and mean, the summary's
bars with the straggler (the server's measures), a user metric named like a system field,
non-finite values, curves that grow while the run goes, in the light and dark themes."""

from __future__ import annotations

import json
import math
import os
import re
import time
import urllib.request
import uuid

from playwright.sync_api import expect

from dist_notebook.protocol import Record
from dist_notebook.store import StoreWriter

from .conftest import ARTIFACTS, chart_fills, open_lab, shot

STRAGGLER = re.compile(r"\bdn-straggler\b")


def records(run_id: str, steps: range, t0: float) -> list[Record]:
    """Rank 1 computes 30 ms a step, rank 0 waits for it in the all-reduce (lockstep)."""
    out = []
    for step in steps:
        for rank in (0, 1):
            comm = 0.032 if rank == 0 else 0.004
            loss = 2.0 / (1 + 0.2 * step) + 0.05 * rank
            out.append(
                Record(
                    rank=rank,
                    step=step,
                    time=t0 + 0.04 * step + 0.001 * rank,
                    step_time=0.04 if step else None,
                    comm_time=comm,
                    samples=32.0,
                    # user metrics named like system fields are only metrics
                    metrics={"loss": math.nan if step == 5 else loss, "seq": 2048.0, "rank": 7.0},
                )
            )
    return out


def fill(writer: StoreWriter, cluster: str, run: str) -> None:
    writer.add_cluster(
        cluster, n=2, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    writer.set_cluster_state(cluster, "ready")
    writer.set_ranks(
        cluster,
        [
            {"rank": r, "host": "localhost", "pid": 1000 + r, "device": "cpu", "state": "busy"}
            for r in (0, 1)
        ],
    )
    writer.add_run(run, name="stored", cluster_id=cluster, ranks=[0, 1], steps=60, code="")
    writer.set_run_state(run, "running")
    for r in (0, 1):
        writer.set_run_rank(run, r, "running")


def server_summary(lab, run: str) -> dict:  # type: ignore[no-untyped-def]
    url = f"{lab.url}dist-notebook/api/runs/{run}/summary?token={lab.token}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def set_theme(page, theme: str, light: bool) -> None:  # type: ignore[no-untyped-def]
    page.evaluate(
        "t => { void window.jupyterapp.commands.execute('apputils:change-theme', {theme: t}); }",
        theme,
    )
    page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{str(light).lower()}'")
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)


def points(page, view, rank: int) -> int:  # type: ignore[no-untyped-def]
    d = view.locator(f"path.dn-chart-line[data-rank='{rank}']").get_attribute("d") or ""
    return d.count("L") + d.count("M")


def test_run_tab_draws_a_stored_run_with_the_servers_measures(shared_lab, page):  # type: ignore[no-untyped-def]
    lab = shared_lab
    cluster, run = f"c-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    writer = StoreWriter(lab.store)
    t0 = time.time()
    try:
        fill(writer, cluster, run)
        writer.append_metrics(run, records(run, range(20), t0))
        open_lab(page, lab)
        set_theme(page, "JupyterLab Light", light=True)  # the shared lab may be dark
        page.evaluate(
            "id => { void window.jupyterapp.commands.execute('dist-notebook:open-run',"
            " {runId: id}); }",
            run,
        )
        view = page.locator(f'.dn-runview[data-run-id="{run}"]')
        expect(view).to_be_visible(timeout=30_000)
        chart = view.locator(".dn-chart")
        expect(chart.locator("path.dn-chart-line")).to_have_count(3)  # 2 ranks + mean
        expect(chart.locator("path.dn-chart-line[data-rank='mean']")).to_have_count(1)
        # the NaN at step 5 is a gap: the path starts again after it
        d = chart.locator("path.dn-chart-line[data-rank='0']").get_attribute("d") or ""
        assert d.count("M") == 2, d
        # the server's measures, drawn as they are: rank 1 is the straggler
        summary = server_summary(lab, run)
        assert [r["straggler"] for r in summary["ranks"]] == [False, True]
        bars = chart.locator(".dn-chart-rank-rows")
        expect(bars.locator("[data-row='rank-1']")).to_have_class(STRAGGLER)
        expect(bars.locator("[data-row='rank-0']")).not_to_have_class(STRAGGLER)
        expect(bars.locator("[data-row='rank-1']")).to_contain_text("straggler")
        expect(chart.locator(".dn-chart-legend-item[data-rank='1']")).to_have_class(STRAGGLER)
        # a user metric named seq is a metric (no paging trouble), selectable
        chart.locator("select.dn-chart-metric").select_option("seq")
        expect(chart.locator("svg.dn-chart-svg")).to_have_attribute("aria-label", "seq per rank")
        chart.locator("select.dn-chart-metric").select_option("loss")
        shot(page, "store-run-tab")
        # the run tab's chart spans the tab, and follows it when the window narrows
        wide = chart_fills(page, chart)
        page.set_viewport_size({"width": 900, "height": 900})
        assert chart_fills(page, chart)["svg"] < wide["svg"] - 300
        page.set_viewport_size({"width": 1440, "height": 900})
        chart_fills(page, chart, wider_than=wide["svg"] - 10)

        # the curves grow while the run goes on, without reloading anything
        before = points(page, chart, 1)
        writer.append_metrics(run, records(run, range(20, 40), t0))
        page.wait_for_function(
            "([id, n]) => (document.querySelector("
            "`.dn-runview[data-run-id='${id}'] path.dn-chart-line[data-rank='1']`)"
            "?.getAttribute('d') ?? '').split('L').length > n",
            arg=[run, before + 10],
            timeout=15_000,
        )

        # log scale and zoom, then the dark theme
        chart.locator("input.dn-chart-log").check()
        box = chart.locator("svg.dn-chart-svg").bounding_box()
        assert box is not None
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] + box["width"] * 0.3, y)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.6, y)
        page.mouse.up()
        assert points(page, chart, 0) < 40, "zoomed in: fewer points drawn"
        chart.locator("button.dn-chart-reset").click()
        set_theme(page, "JupyterLab Dark", light=False)
        shot(page, "store-run-tab-dark")
        chart.screenshot(path=str(ARTIFACTS / "store-run-chart-dark.png"))

        writer.set_run_state(run, "succeeded")
        expect(view).to_have_attribute("data-state", "succeeded", timeout=15_000)
    finally:
        writer.close()
