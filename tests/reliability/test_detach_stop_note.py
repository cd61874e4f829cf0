"""The panel's Stop of a detached cluster whose run a kernel follows says so in that
kernel (issue #42, item 8): the keeper runs the training, and its end line ("run NAME
cancelled: Stop in the JupyterLab panel stopped cluster ID; ...") reaches the kernel
through the run store, in the blocking cell's output. A real kernel; the Stop goes as the
Jupyter server sends it, through the store's control queue to the keeper's owner."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from dist_notebook.store.control import ControlQueue

from .conftest import Kernel, kill_all, wait_gone
from .test_detach import info_of, stored_run, tree_of

pytestmark = pytest.mark.timeout(240)

TRAIN = """%%dist_train --name followed --no-dashboard
import time
for step in range(1200):
    report(step=step, loss=1.0)
    time.sleep(0.05)
"""


def test_a_kernel_following_a_kept_run_hears_of_the_panels_stop(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    kernel = Kernel(str(store))
    tree: list[int] = []
    try:
        out, errors = kernel.run("%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu --detach")
        assert not errors, errors
        info = info_of(kernel)
        tree = tree_of(info["keeper"])
        texts: list[str] = []
        msg_id = kernel.kc.execute(TRAIN)
        deadline = time.monotonic() + 90
        while True:  # the keeper's run trains: records reach the store
            run = stored_run(str(store), "followed")
            if run is not None and run["records"] >= 10:
                break
            assert time.monotonic() < deadline, run
            time.sleep(0.2)
        queue = ControlQueue(store)
        try:
            seq = queue.request(info["id"], "stop")
            while queue.answer(seq)["done"] is None:
                assert time.monotonic() < deadline + 60, queue.answer(seq)
                time.sleep(0.1)
            answer = queue.answer(seq)
        finally:
            queue.close()
        assert answer["result"] == "stopped", answer
        while True:  # the blocking cell's output, to its end
            msg: dict[str, Any] = kernel.kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            content = msg["content"]
            if msg["msg_type"] == "stream":
                texts.append(content["text"])
            elif msg["msg_type"] == "error":
                texts.append(f"{content['ename']}: {content['evalue']}\n")
            elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
                break
        said = (
            f"run followed cancelled: Stop in the JupyterLab panel stopped cluster "
            f"{info['id']}; %dist_cluster start makes a new one"
        )
        shown = "".join(texts)
        assert said in shown.splitlines(), shown
        assert "Error" not in shown, shown
        assert wait_gone(tree, 30)[0] == [], "the keeper's tree outlived the Stop"
    finally:
        kernel.close()
        kill_all(tree)
