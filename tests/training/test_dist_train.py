"""``%%dist_train`` end to end on the shared 2-rank CPU (gloo) cluster.

Records reach the run store complete and in order, the dashboard's widgets follow the
run, the Stop button cancels every rank, a raising rank fails the run, and another
process can read the store while a run goes on.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from IPython.utils.capture import capture_output

from dist_notebook import load_run
from dist_notebook.cluster.onranks.execute import RankError
from dist_notebook.display.live import FLUSH_EVERY
from dist_notebook.protocol import Record
from dist_notebook.store import StoreReader
from testbed.cells import TRAIN_CELL

from .conftest import result_of, wait_for

pytestmark = pytest.mark.slow
RANKS = (0, 1)


def by_rank(records: list[Record]) -> dict[int, list[Record]]:
    out: dict[int, list[Record]] = {r: [] for r in RANKS}
    for rec in records:
        out[rec.rank].append(rec)
    return out


def table_step(table_html: str, rank: int) -> str:
    """The steps column of *rank*'s row in the final table (rank, host, state, steps ...)."""
    row = re.search(rf"<tr data-rank='{rank}'[^>]*>(.*?)</tr>", table_html)
    assert row, table_html
    cells = re.findall(r"<td>(.*?)</td>", row.group(1))
    return cells[3]


@pytest.fixture(scope="module")
def fifty(shell: Any, train_defined: Any) -> dict[str, Any]:
    """One 50-step DDP run written in the cell, shared by the tests that inspect it."""
    magics = shell.magics_manager.registry["TrainMagics"]
    with capture_output() as captured:
        shell.run_cell_magic("dist_train", "--name fifty --steps 50", TRAIN_CELL.format(steps=50))
    return {
        "result": magics.last_result,
        "dashboard": magics.last_dashboard,
        "run": magics.last_run,
        "outputs": captured.outputs,
    }


def test_every_step_of_every_rank_is_stored_in_order(fifty: dict[str, Any]) -> None:
    result = fifty["result"]
    assert result.state.value == "succeeded"
    assert result.records == 100
    stored = load_run("fifty")
    assert stored.id == result.run_id and stored.state == "succeeded"
    records = stored.records()
    assert len(records) == 50 * 2
    for rank, recs in by_rank(records).items():
        assert [r.step for r in recs] == list(range(50)), f"rank {rank}"
        times = [r.time for r in recs]
        assert times == sorted(times)
        assert all(isinstance(r.metrics["loss"], float) and r.samples == 32 for r in recs)
        assert recs[0].step_time is None
        assert all(r.step_time is not None and r.step_time > 0 for r in recs[1:])
        # DDP's own timing of its all-reduce (sampled; first filled at the second step's
        # forward) gives every later step a comm time, never longer than the step.
        assert all(r.comm_time is not None and r.comm_time > 0 for r in recs[1:])
        assert all(r.comm_time <= r.step_time for r in recs[1:])  # type: ignore[operator]


def test_loss_falls_on_a_learnable_task(fifty: dict[str, Any]) -> None:
    mean_loss = fifty["run"].metrics.mean_series("loss")[1]
    assert len(mean_loss) == 50
    first, last = sum(mean_loss[:5]) / 5, sum(mean_loss[-5:]) / 5
    assert last < 0.5 * first, (first, last)


def test_dashboard_shows_the_last_step(fifty: dict[str, Any]) -> None:
    final = fifty["dashboard"].final_bundle
    for rank in RANKS:
        assert table_step(final["text/html"], rank) == "50"  # steps done
    assert "succeeded" in final["text/plain"] and "step 50/50" in final["text/plain"]
    png = base64.b64decode(final["image/png"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000, len(png)
    assert fifty["dashboard"].widget.comm is None, "no live view (nor Stop) after the end"
    assert "rank 1: done steps 50" in final["text/plain"]


def test_display_keeps_a_static_picture_after_the_run(fifty: dict[str, Any]) -> None:
    outputs = fifty["outputs"]
    first = outputs[0]
    assert "application/vnd.jupyter.widget-view+json" in first.data
    # Beside the widget, no picture: a note that names the run, for a page without a
    # widget front end (nbconvert, a saved file opened later).
    assert "<img" not in first.data["text/html"]
    assert "dist_notebook.load_run(&#x27;fifty&#x27;)" in first.data["text/html"]
    final = outputs[-1]
    assert final.update, "the run's own display is updated in place, not a new output"
    assert "<img src='data:image/png;base64,iVBORw0KGgo" in final.data["text/html"]
    assert final.data["text/plain"].startswith("fifty: succeeded")
    assert fifty["result"] is not None


def test_live_view_messages_are_batched(trainer: Any, shell: Any) -> None:
    t0 = time.monotonic()
    with capture_output():
        shell.run_cell_magic("dist_train", "--steps 200", "train(200)")
    elapsed = time.monotonic() - t0
    dashboard, result = trainer.last_dashboard, trainer.last_result
    assert result.records == 400 and dashboard.feed.points == 400
    assert 1 <= dashboard.feed.messages <= elapsed / FLUSH_EVERY + 3
    assert table_step(dashboard.final_bundle["text/html"], 0) == "200"


def test_another_process_reads_the_store_during_a_run(
    trainer: Any, shell: Any, throwaway_store: str
) -> None:
    with capture_output():
        shell.run_cell_magic("dist_train", "--background --name watched", "train(300, pause=0.05)")
    run = trainer.last_run  # 15 s: the reader below starts while it runs, even under load
    # Records reach the store in batches after the kernel has them: wait for the store.
    store = StoreReader(Path(throwaway_store))
    wait_for(lambda: len(store.metrics(run.id)) >= 4, 20, "the first records in the store")
    reader = textwrap.dedent(f"""
        import json, time
        from pathlib import Path
        from dist_notebook.store import StoreReader
        reader = StoreReader(Path({throwaway_store!r}))
        seen = [(len(reader.metrics({run.id!r})), reader.run({run.id!r})["state"])]
        deadline = time.monotonic() + 20  # until the store grows: an event, not a sleep
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = len(reader.metrics({run.id!r}))
            if now > seen[0][0]:
                break
        seen.append((now, reader.run({run.id!r})["state"]))
        print(json.dumps(seen))
    """)
    done = subprocess.run(
        [sys.executable, "-c", reader], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    (first, first_state), (second, _) = json.loads(done.stdout)
    assert first_state == "running"
    assert 0 < first < second <= 600
    result = result_of(trainer, run)
    assert result.state.value == "succeeded" and len(StoreReader().metrics(run.id)) == 600


def test_stop_button_cancels_every_rank(trainer: Any, shell: Any) -> None:
    # No collective in this loop: SIGINT cannot free a rank blocked in gloo (see DESIGN).
    with capture_output():
        shell.run_cell_magic(
            "dist_train", "--background --name stopped", "train(2000, pause=0.02, ddp=False)"
        )
    run, dashboard = trainer.last_run, trainer.last_dashboard
    wait_for(lambda: all(run.metrics.records(r) for r in RANKS), 20, "records from every rank")
    clicked = time.monotonic()
    # what a click on the live view's Stop sends over the widget's comm
    dashboard.widget._handle_custom_msg({"kind": "stop"}, [])
    assert dashboard.stop_requested
    result = result_of(trainer, run, timeout=30)
    # The run would go on ~40 s; the bound is for a loaded machine (typically ~1 s).
    assert time.monotonic() - clicked < 20
    assert result.state.value == "cancelled" and result.error is None
    assert run.rank_states == {0: "cancelled", 1: "cancelled"}
    stored = StoreReader().run(run.id)
    assert stored is not None and stored["state"] == "cancelled"
    assert [(r["rank"], r["state"]) for r in stored["ranks"]] == [
        (0, "cancelled"),
        (1, "cancelled"),
    ]
    assert len(StoreReader().metrics(run.id)) == result.records < 4000
    assert "cancelled" in dashboard.final_bundle["text/plain"]
    # The cluster is still usable, process group included.
    with capture_output():
        shell.run_cell_magic(
            "dist", "", "t = torch.ones(1); dist.all_reduce(t); after_stop = t.item()"
        )
    assert shell.run_line_magic("dist_pull", "--all after_stop") == {0: 2.0, 1: 2.0}


def test_a_raising_rank_fails_the_run(trainer: Any, shell: Any) -> None:
    # Rank 1 reports steps 0..19 as fast as it can, then raises; rank 0 goes on to 40.
    with capture_output(), pytest.raises(RankError) as raised:
        shell.run_cell_magic(
            "dist_train", "--name failing", "train(40, ddp=False, fail_rank=1, fail_at=20)"
        )
    assert raised.value.rank == 1 and raised.value.ename == "ValueError"
    assert "rank 1 raised ValueError: bad batch at step 20" in str(raised.value)
    result, run = trainer.last_result, trainer.last_run
    assert result.state.value == "failed" and result.rank_states == {0: "done", 1: "failed"}
    stored = StoreReader().run(run.id)
    assert stored is not None and stored["state"] == "failed"
    ranks = {r["rank"]: r for r in stored["ranks"]}
    assert ranks[1]["state"] == "failed" and "bad batch at step 20" in ranks[1]["error"]
    assert ranks[0]["state"] == "done"
    steps = {
        rank: [r.step for r in recs]
        for rank, recs in by_rank(StoreReader().records(run.id)).items()
    }
    assert steps == {0: list(range(40)), 1: list(range(20))}
    assert "failed" in trainer.last_dashboard.final_bundle["text/plain"]


def test_line_form_calls_a_function_from_a_dist_cell(trainer: Any, shell: Any) -> None:
    with capture_output():
        assert shell.run_line_magic("dist_train", "--name line train(steps=10)") is None
    result = trainer.last_result
    assert result.state.value == "succeeded" and result.records == 20
    assert [r.step for r in load_run("line").records() if r.rank == 0] == list(range(10))


def test_line_form_keeps_quotes_in_the_expression(trainer: Any, shell: Any) -> None:
    with capture_output():
        shell.run_cell_magic(
            "dist",
            "",
            "def tagged(tag, steps):\n    assert tag == 'a b', tag\n    return train(steps)",
        )
        shell.run_line_magic("dist_train", "--name quoted tagged('a b', steps=3)")
    result = trainer.last_result
    assert result.state.value == "succeeded" and result.records == 6


def test_report_outside_a_run_does_nothing_on_the_ranks(shell: Any, train_defined: Any) -> None:
    with capture_output():
        shell.run_cell_magic("dist", "", "outside = report(step=0, loss=torch.tensor(1.0))")
    assert shell.run_line_magic("dist_pull", "--all outside") == {0: None, 1: None}


def test_runs_are_listed_and_exported(fifty: dict[str, Any], shell: Any, tmp_path: Path) -> None:
    with capture_output() as captured:
        shell.run_line_magic("dist_runs", "")
    listing = captured.outputs[-1].data["text/plain"]
    row = next(line for line in listing.splitlines() if fifty["result"].run_id in line)
    assert row.split()[:3] == ["fifty", fifty["result"].run_id, "succeeded"]
    path = load_run(fifty["result"].run_id).to_csv(tmp_path / "fifty.csv")
    lines = path.read_text().splitlines()
    assert lines[0].split(",")[:3] == ["rank", "step", "time"]
    assert {"loss", "samples", "step_time", "comm_time"} <= set(lines[0].split(","))
    assert len(lines) == 1 + 100
