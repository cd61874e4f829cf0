"""Two training runs on one cluster at once: the second is refused with a clear message,
and the records of the first stay its own, each (rank, step) exactly once."""

from __future__ import annotations

import time
from typing import Any

import pytest
from IPython.core.error import UsageError

from dist_notebook.training import RunSpec, TrainingRun, load_run
from dist_notebook.training.run import RunBusyError

pytestmark = pytest.mark.timeout(120)

BACKGROUND = """%%dist_train --name {name} --background --no-dashboard
import time
for step in range(40):
    report(step=step, loss=1.0)
    time.sleep(0.05)
"""


def test_second_run_on_busy_ranks_is_refused(shell: Any, cluster2: Any) -> None:
    magics = shell.magics_manager.registry["TrainMagics"]
    magics.last_result = None
    first = shell.run_cell(BACKGROUND.format(name="busyA"))
    assert first.error_in_exec is None, first.error_in_exec
    second = shell.run_cell(BACKGROUND.format(name="busyB"))
    # Refused at once, in one line, before the second run or its live view is made.
    assert isinstance(second.error_in_exec, UsageError), second.error_in_exec
    message = str(second.error_in_exec)
    assert message.startswith("%%dist_train: cannot start another run while run busyA"), message
    assert "trains in the background" in message and "\n" not in message
    # A run made from a script (no magic) is refused by the run itself.
    with pytest.raises(RunBusyError, match=r"run busyA \(\w+\) is still running on this cluster"):
        TrainingRun(cluster2, RunSpec(code="pass", name="busyD"))
    deadline = time.monotonic() + 60
    while magics.last_result is None:
        assert time.monotonic() < deadline, "the background run never ended"
        time.sleep(0.1)
    assert magics.last_result.name == "busyA"
    assert magics.last_result.state.value == "succeeded"
    run = load_run("busyA")
    pairs = [(r.rank, r.step) for r in run.records()]
    assert sorted(pairs) == [(rank, step) for rank in (0, 1) for step in range(40)]
    with pytest.raises(LookupError):
        load_run("busyB")  # refused before anything of it was recorded
    with pytest.raises(LookupError):
        load_run("busyD")
    # Once the first has ended, the next run starts.
    third = shell.run_cell(BACKGROUND.format(name="busyC").replace("--background ", ""))
    assert third.error_in_exec is None, third.error_in_exec
    assert len(load_run("busyC").records()) == 80
