"""The cell's live view, kernel side: what it sends over the widget's comm, and what the
output becomes when the run ends. Real runs on the shared 2-rank gloo cluster; the
messages are read where the widget sends them (the browser tests draw them)."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from IPython.utils.capture import capture_output

from dist_notebook.display.live import MAX_POINTS, LiveFeed, LiveRunWidget, stride_for, thin
from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import Record
from dist_notebook.store import StoreReader

from .conftest import wait_for

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

# DDP, and rank 1 computes 15 ms longer each step: the straggler, by compute time.
SLOW_RANK_CELL = """
import time
import torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from dist_notebook import report
model = DDP(nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(60):
    x = torch.randn(32, 8)
    if dist.get_rank() == 1:
        time.sleep(0.015)
    loss = (model(x) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    report(step=i, loss=loss, samples=32)
"""


def rec(rank: int, step: int, **metrics: float) -> Record:
    return Record(rank=rank, step=step, time=1000.0 + step, samples=32.0, metrics=metrics)


class Sent:
    """Records what a widget sends over its comm (the comm itself still sends)."""

    def __init__(self, widget: LiveRunWidget) -> None:
        self.messages: list[dict[str, Any]] = []
        send = widget.send

        def recording(content: dict[str, Any], buffers: Any = None) -> None:
            self.messages.append(content)
            send(content, buffers)

        widget.send = recording  # type: ignore[method-assign]

    def records(self) -> list[dict[str, Any]]:
        return [r for m in self.messages for r in m["records"]]


def test_records_are_sent_as_they_are_up_to_max_points() -> None:
    assert stride_for(10) == 1 and stride_for(MAX_POINTS) == 1
    assert stride_for(MAX_POINTS + 1) == 2 and stride_for(5 * MAX_POINTS) == 8
    recs = [rec(0, i, loss=float(i % 7)) for i in range(100)]
    assert thin(recs, 1) == recs


def test_long_runs_are_sent_as_min_max_envelopes_keeping_gaps() -> None:
    recs = [rec(0, i, loss=float(i)) for i in range(8)]
    recs[5].metrics["loss"] = math.nan
    out = thin(recs, 4)
    assert len(out) == 4  # two records for each bucket of four
    assert [r.step for r in out] == [0, 3, 4, 7]
    assert out[0].metrics["loss"] == 0.0 and out[1].metrics["loss"] == 3.0
    assert math.isnan(out[2].metrics["loss"]), "the gap in the second bucket is kept"
    assert out[3].metrics["loss"] == 7.0


def test_the_feed_batches_new_records_off_the_collectors_thread() -> None:
    metrics = RunMetrics([0, 1])
    widget = LiveRunWidget(name="feed")
    sent = Sent(widget)
    feed = LiveFeed(widget, metrics, lambda: metrics.run_summary("r", "running", 300), 0.1)
    feed.start()
    t0 = time.monotonic()
    for step in range(300):
        metrics.add([rec(0, step, loss=1.0), rec(1, step, loss=2.0)])
    added = time.monotonic() - t0
    wait_for(lambda: len(sent.records()) == 600, 10, "every record sent")
    feed.stop()
    # 600 records in a few messages, each with the run's summary
    assert 1 <= len(sent.messages) <= 3 + added / 0.1, len(sent.messages)
    last = sent.messages[-1]["summary"]
    assert last["steps_done"] == 300 and [r["rank"] for r in last["ranks"]] == [0, 1]
    assert sent.records()[0] == rec(0, 0, loss=1.0).to_json()
    assert feed.cpu > 0
    widget.close()


def test_a_late_view_gets_the_whole_history_with_reset() -> None:
    metrics = RunMetrics([0])
    widget = LiveRunWidget(name="late")
    sent = Sent(widget)
    feed = LiveFeed(widget, metrics, lambda: metrics.run_summary("r", "running", None))
    metrics.add([rec(0, i, loss=float(i)) for i in range(5)])
    feed.history()
    assert sent.messages[-1]["reset"] is True
    assert [r["step"] for r in sent.messages[-1]["records"]] == list(range(5))
    widget.close()


@pytest.fixture(scope="module")
def slow_run(shell: Any, cluster2: Any) -> dict[str, Any]:
    magics = shell.magics_manager.registry["TrainMagics"]
    from dist_notebook.display import dashboard as dashboard_module

    made: list[Any] = []
    original = dashboard_module.LiveFeed

    def recording_feed(widget: LiveRunWidget, *args: Any, **kwargs: Any) -> LiveFeed:
        made.append(Sent(widget))
        return original(widget, *args, **kwargs)

    dashboard_module.LiveFeed = recording_feed  # type: ignore[misc,assignment]
    try:
        with capture_output() as captured:
            value = shell.run_cell_magic(
                "dist_train", "--name slow-rank --steps 60", SLOW_RANK_CELL
            )
    finally:
        dashboard_module.LiveFeed = original  # type: ignore[misc]
    return {
        "value": value,
        "sent": made[0],
        "dashboard": magics.last_dashboard,
        "result": magics.last_result,
        "captured": captured,
    }


def test_the_live_view_got_every_record_and_the_final_summary(slow_run: dict[str, Any]) -> None:
    sent, result = slow_run["sent"], slow_run["result"]
    assert result.state.value == "succeeded" and result.records == 120
    assert len(sent.records()) == 120
    assert len(sent.messages) >= 2, "records went in batches while the run went"
    final = sent.messages[-1]["summary"]
    assert final["state"] == "succeeded" and final["steps_done"] == 60 and final["steps"] == 60


def test_the_output_becomes_a_static_picture_and_the_end_is_said_once(
    slow_run: dict[str, Any],
) -> None:
    outputs, dashboard = slow_run["captured"].outputs, slow_run["dashboard"]
    assert slow_run["value"] is None, "no Out[] <RunResult> after the run's own output"
    assert WIDGET_MIME in outputs[0].data
    final = outputs[-1]
    assert final.update, "the live view's output is updated in place, not a new output"
    assert WIDGET_MIME not in final.data, "no widget view in the saved notebook"
    assert final.data["image/png"].startswith("iVBORw0KGgo")
    assert "<img src='data:image/png;base64,iVBORw0KGgo" in final.data["text/html"]
    assert "slow-rank: succeeded in " in final.data["text/plain"]
    assert "step 60/60" in final.data["text/plain"]
    assert "succeeded" not in slow_run["captured"].stdout, "the end was printed as well"
    assert dashboard.widget.comm is None, "the widget is closed: no model left to miss"


def test_the_cell_and_the_panel_show_the_same_measures(slow_run: dict[str, Any]) -> None:
    # The cell's last summary (sent to the live view) and the panel's (the REST API's,
    # computed from the run store) are the same numbers, straggler included.
    cell = slow_run["sent"].messages[-1]["summary"]
    stored = StoreReader().summary(slow_run["result"].run_id)
    assert stored is not None
    panel = stored.to_json()
    assert [r["straggler"] for r in cell["ranks"]] == [False, True]
    assert [r["straggler"] for r in panel["ranks"]] == [False, True]
    for mine, theirs in zip(cell["ranks"], panel["ranks"], strict=True):
        assert mine["samples_per_s"] == pytest.approx(theirs["samples_per_s"], rel=1e-9)
    assert cell["samples_per_s"] == pytest.approx(panel["samples_per_s"], rel=1e-9)
    assert cell["steps_done"] == panel["steps_done"] == 60


def test_without_a_kernel_a_blocking_run_offers_no_stop_button(
    slow_run: dict[str, Any],
) -> None:
    # This shell has no kernel subshell to route the widget's messages to: the view
    # hides Stop (the kernel's interrupt stops the run) rather than show a dead button.
    dashboard = slow_run["dashboard"]
    assert dashboard.route is not None and not dashboard.route.available
    assert dashboard.widget.stoppable is False
