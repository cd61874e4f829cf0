"""A Stop inside the user's data generator ends it for good: the stopped run says so, and
the next run, failing with StopIteration, says to re-run the cell that builds the iterator.
On the session's real 2-rank CPU cluster, stopped as the live view's Stop button does."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dist_notebook.cluster.onranks.execute import RankError
from dist_notebook.training.iterators import FIX, ended_by_stop

pytestmark = pytest.mark.timeout(120)

DATA = """
import time
def batches():
    for i in range(10**9):
        time.sleep(0.05)   # where the Stop lands: inside the generator
        yield i
it = batches()
"""
LOOP = "for s in range({n}):\n    x = next(it)\n    report(step=s, loss=1.0)\n"


def stop_soon(magics: Any, shell: Any) -> Any:
    """Start a background run of LOOP, stop it once it has records, return its result."""
    magics.last_result = None
    shell.run_cell_magic("dist_train", "--background --no-dashboard", LOOP.format(n=100_000))
    run = magics.last_run
    deadline = time.monotonic() + 60
    while run.metrics.count < 4:  # every rank is in the loop
        assert time.monotonic() < deadline, "the run reported nothing within 60 s"
        time.sleep(0.1)
    time.sleep(0.5)  # the ranks spend almost all of each step inside the generator's sleep
    run.stop()
    while magics.last_result is None:
        assert time.monotonic() < deadline, "the stopped run did not end within 60 s"
        time.sleep(0.1)
    return magics.last_result


def test_stop_inside_the_generator_then_the_next_run(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    magics = shell.magics_manager.registry["TrainMagics"]
    shell.run_cell_magic("dist", "", DATA)
    capsys.readouterr()
    result = stop_soon(magics, shell)
    assert result.state.value == "cancelled"
    out = capsys.readouterr().out
    assert "the Stop ended the data iterator it (batches())" in result.hint
    assert f"{FIX} before the next run" in out
    # The next run: next(it) raises StopIteration at once on every rank.
    with pytest.raises(RankError) as info:
        shell.run_cell_magic("dist_train", "--no-dashboard", LOOP.format(n=3))
    message = str(info.value)
    assert message.startswith(
        "rank "
    ) and "raised StopIteration: the data iterator is exhausted" in (message)
    assert message.endswith(FIX)
    assert magics.last_result.state.value == "failed"
    # Built again, it works again.
    shell.run_cell_magic("dist", "", "it = batches()")
    shell.run_cell_magic("dist_train", "--no-dashboard", LOOP.format(n=3))
    assert magics.last_result.state.value == "succeeded"


def test_a_stop_outside_any_generator_says_nothing_of_iterators() -> None:
    assert ended_by_stop(None, [0, 1], None) == ""
