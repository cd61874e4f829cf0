"""The live view a new kernel gets at ``%dist_cluster attach`` of a ``--background`` run in
progress (real kernels, a real detached 2-rank cluster): the widget's state holds the run's
own start (from the run store, seconds before the attach) and its total steps, so the
header counts the run's time and shows ``step N/total`` and an ETA; the text the kernel
shows without a widget front end says so too (``step N/120 · ETA``); once the run ends,
the view becomes the end's picture and the line "is in progress: following it" becomes
"ended succeeded after N s".
"""

from __future__ import annotations

import queue
import re
import time
from pathlib import Path
from typing import Any

import pytest

from dist_notebook.store import StoreReader

from .conftest import Kernel, kill_all
from .test_detach import info_of, stored_run, tree_of

pytestmark = pytest.mark.timeout(300)

STEPS = 120
TRAIN = f"""%%dist_train --background --name followed --steps {STEPS}
import time, torch, torch.distributed as dist
from dist_notebook import report
for i in range({STEPS}):
    dist.all_reduce(torch.ones(1))
    report(step=i, loss=1.0 / (i + 1), samples=8)
    time.sleep(0.08)
"""


def messages_until_idle(kernel: Kernel, code: str, timeout: float = 90) -> list[dict[str, Any]]:
    """Every iopub message of *code*'s cell (comm_open included), up to its idle."""
    msg_id = kernel.kc.execute(code)
    msgs: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kernel.kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return msgs
        msgs.append(msg)
    raise AssertionError(f"the cell did not end in {timeout} s: {[m['msg_type'] for m in msgs]}")


def test_the_attached_view_shows_the_runs_clock_steps_eta_and_end(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.sqlite")
    first = Kernel(store)
    second: Kernel | None = None
    tree: list[int] = []
    try:
        out, errors = first.run("%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu --detach")
        assert not errors and "is detached" in out, (out, errors)
        tree = tree_of(info_of(first)["keeper"])
        out, errors = first.run(TRAIN)
        assert not errors, errors
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            run = stored_run(store, "followed")
            if run is not None and run["records"] >= 2 * 15:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the run never trained: {stored_run(store, 'followed')}")
        out, errors = first.run("%dist_cluster detach")
        assert not errors and "goes on without this kernel" in out, (out, errors)
        assert run is not None

        second = Kernel(store)
        attached_at = time.time()
        msgs = messages_until_idle(second, "%load_ext dist_notebook\n%dist_cluster attach")
        opened = [
            m["content"]["data"]["state"]
            for m in msgs
            if m["msg_type"] == "comm_open" and "run_id" in m["content"]["data"].get("state", {})
        ]
        assert len(opened) == 1, [m["msg_type"] for m in msgs]
        state = opened[0]
        assert state["steps"] == STEPS, state
        assert state["run_id"] == run["id"], state
        # the run's own start, as the store has it, not the attach's time
        assert state["started"] == pytest.approx(run["started"], abs=0.01), (state, run)
        assert state["started"] < attached_at - 1.0, (state["started"], attached_at)
        lines = [
            m["content"]
            for m in msgs
            if m["msg_type"] == "display_data"
            and "following it" in m["content"]["data"].get("text/plain", "")
        ]
        assert len(lines) == 1, [m["content"].get("data", m["content"]) for m in msgs]
        line_id = lines[0]["transient"]["display_id"]

        # After the cell: the text progress (no widget front end here), then the end.
        texts: list[str] = []
        ended: str | None = None
        final = False
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (ended is None or not final):
            try:
                msg = second.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            if msg["msg_type"] != "update_display_data":
                continue
            data = msg["content"]["data"]
            if msg["content"]["transient"]["display_id"] == line_id:
                ended = data.get("text/plain", "")
            elif "image/png" in data:
                final = True
            else:
                texts.append(str(data.get("text/plain", "")))
        assert ended is not None and final, (ended, final, texts[-3:])
        assert re.fullmatch(rf"run followed \({run['id']}\) ended succeeded after \d+ s", ended), (
            ended
        )
        progress = [t for t in texts if re.search(rf"step \d+/{STEPS} · ETA \d+ s", t)]
        assert progress, texts[-5:]
        # the header's clock is the run's: at least the run's age at the attach
        first_elapsed = int(re.search(r"running · (\d+) s", progress[0]).group(1))  # type: ignore[union-attr]
        assert first_elapsed >= int(attached_at - run["started"]), (progress[0], run["started"])
        reader = StoreReader(Path(store))
        try:
            stored = reader.find_run("followed")
            assert stored is not None and stored["state"] == "succeeded", stored
        finally:
            reader.close()
        out, errors = second.run("%dist_cluster stop")
        assert not errors, errors
    finally:
        for kernel in (first, second):
            if kernel is not None:
                kernel.close()
        kill_all(tree)
