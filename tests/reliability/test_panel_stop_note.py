"""The panel's Stop of a cluster whose run goes on says so in the notebook: the run ends
cancelled and its cell says the cluster was stopped, by what, and how to get another
(the session's shell, a cluster of this test's own; the Stop goes as the Jupyter server's
panel sends it, through the run store's control queue to the owner's watcher)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from IPython.utils.capture import capture_output

from dist_notebook.store.control import ControlQueue

pytestmark = pytest.mark.timeout(180)

BACKGROUND = """%%dist_train --name {name} --background --no-dashboard
import time
for step in range(600):
    report(step=step, loss=1.0)
    time.sleep(0.05)
"""


def test_a_panel_stop_says_the_cluster_was_stopped(shell: Any, own_cluster: Any) -> None:
    magics = shell.magics_manager.registry["TrainMagics"]
    with capture_output() as shown:
        started = shell.run_cell(BACKGROUND.format(name="panel-stopped"))
        assert started.error_in_exec is None, started.error_in_exec
        run = own_cluster.owner.active_run()
        deadline = time.monotonic() + 60
        while run.metrics.count < 4:  # the run trains
            assert time.monotonic() < deadline, run.state
            time.sleep(0.05)
        queue = ControlQueue()
        try:
            seq = queue.request(own_cluster.id, "stop")
            while queue.answer(seq)["done"] is None:
                assert time.monotonic() < deadline + 60, queue.answer(seq)
                time.sleep(0.1)
            answer = queue.answer(seq)
        finally:
            queue.close()
        while magics.last_result is None or magics.last_result.run_id != run.id:
            assert time.monotonic() < deadline + 90, "the run's end never came"
            time.sleep(0.05)
    result = magics.last_result
    assert answer["result"] == "stopped", answer
    assert result.state.value == "cancelled", result
    said = (
        f"run panel-stopped cancelled: Stop in the JupyterLab panel stopped cluster "
        f"{own_cluster.id}; %dist_cluster start makes a new one"
    )
    assert result.hint.splitlines()[0] == said, result.hint
    assert said in shown.stdout, shown.stdout
    assert own_cluster.state.value == "stopped"
