"""The run tab's chart as a user reads it in chromium, on a run the real store writer
recorded: the rank table's samples/s is the number on the bar beside it (1244, not a
rounded 1240), and the hover tooltip follows the axis while it rescales (records keep
coming under a resting pointer: the tooltip and its rule show the step under the pointer,
not the step that was there before the axis grew)."""

from __future__ import annotations

import re
import time
import uuid

from playwright.sync_api import expect

from dist_notebook.protocol import Record
from dist_notebook.store import StoreWriter

from .conftest import open_lab, shot
from .test_panel_store import fill, set_theme

STEP_S = 0.04
SAMPLES = 49.77  # a step's samples: 1244.25 samples/s a rank


def records(steps: range, t0: float) -> list[Record]:
    return [
        Record(
            rank=rank,
            step=step,
            time=t0 + STEP_S * step,
            step_time=STEP_S if step else None,
            comm_time=0.004,
            samples=SAMPLES,
            metrics={"loss": 2.0 / (1 + 0.2 * step) + 0.05 * rank},
        )
        for step in steps
        for rank in (0, 1)
    ]


def tip_step(chart) -> int | None:  # type: ignore[no-untyped-def]
    head = chart.locator(".dn-chart-tip-head")
    if not head.is_visible():
        return None
    found = re.match(r"step (\d+)", head.text_content() or "")
    return int(found.group(1)) if found else None


def test_run_tab_numbers_agree_and_the_tooltip_follows_a_rescaling_axis(shared_lab, page):  # type: ignore[no-untyped-def]
    lab = shared_lab
    cluster, run = f"c-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    writer = StoreWriter(lab.store)
    t0 = time.time()
    try:
        fill(writer, cluster, run)
        writer.append_metrics(run, records(range(20), t0))
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
        expect(chart.locator("path.dn-chart-line[data-rank='1']")).to_have_count(1)

        # samples/s: the table's cell and the bar's number are the same text
        bar = chart.locator(".dn-chart-rank-rows [data-row='rank-0'] .dn-chart-bar-value")
        expect(bar).to_have_text("1244", timeout=15_000)
        cell = view.locator(".dn-runview-rank[data-rank='0'] td").nth(4)
        expect(cell).to_have_text("1244")

        # the pointer rests at 90% of the plot's width: the last steps drawn
        svg = chart.locator("svg.dn-chart-svg")
        box = svg.bounding_box()
        assert box is not None
        mouse_x = box["width"] * 0.9
        page.mouse.move(box["x"] + mouse_x, box["y"] + box["height"] / 2)
        expect(chart.locator(".dn-chart-tip")).to_be_visible()
        before = tip_step(chart)
        assert before is not None and 14 <= before <= 19, before
        # more records: the x axis grows to step 59 under the resting pointer
        writer.append_metrics(run, records(range(20, 60), t0))
        page.wait_for_function(
            "el => el.querySelector('path.dn-chart-line[data-rank=\"1\"]')"
            "?.getAttribute('d')?.split('L').length > 40",
            arg=chart.element_handle(),
            timeout=15_000,
        )
        page.wait_for_timeout(300)  # a frame or two after the draw
        after = tip_step(chart)
        shot(page, "run-tab-hover-rescaled")
        assert after is not None and after >= 45, (
            f"the tooltip says step {after} after the axis grew to 59 (step {before} before)"
        )
        # the rule stands where the pointer is, not where the old step now is
        rule = svg.locator("line.dn-chart-rule")
        expect(rule).to_have_attribute("visibility", "visible")
        scale = box["width"] / float(svg.get_attribute("width") or box["width"])
        rule_x = float(rule.get_attribute("x1") or "nan") * scale
        assert abs(rule_x - mouse_x) < 20, (rule_x, mouse_x)
        # the pointer leaves: the tooltip goes, and a later draw does not bring it back
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] - 40)
        expect(chart.locator(".dn-chart-tip")).to_be_hidden()
        writer.append_metrics(run, records(range(60, 70), t0))
        page.wait_for_timeout(2500)
        expect(chart.locator(".dn-chart-tip")).to_be_hidden()
        writer.set_run_state(run, "succeeded")
        expect(view).to_have_attribute("data-state", "succeeded", timeout=15_000)
    finally:
        writer.close()
