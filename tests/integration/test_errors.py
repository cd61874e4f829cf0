"""A rank that raises, a cell that runs too long, Ctrl-C: the cluster stays usable after."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from dist_notebook.cluster.onranks.execute import RankError, run_on_ranks

pytestmark = pytest.mark.timeout(60)

RAISE_ON_1 = "print('before', rank)\nif rank == 1:\n    raise ValueError(f'bad batch on {rank}')\n"


def still_works(cluster: Any) -> None:
    outputs = run_on_ranks(cluster, "t = torch.ones(1)\ndist.all_reduce(t)\nprint(int(t.item()))")
    assert [o.stdout for o in outputs] == ["2\n", "2\n"]


def test_rank_error_names_the_rank(cluster2: Any) -> None:
    with pytest.raises(RankError) as info:
        run_on_ranks(cluster2, RAISE_ON_1)
    error = info.value
    assert (error.rank, error.ename) == (1, "ValueError")
    assert "rank 1 raised ValueError: bad batch on 1" in str(error)
    assert [f.rank for f in error.failures] == [1]
    still_works(cluster2)


def test_failing_cell_shows_the_rank_in_the_notebook(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    result = shell.run_cell("%%dist\n" + RAISE_ON_1)
    out = capsys.readouterr().out
    assert isinstance(result.error_in_exec, RankError)
    assert "[rank 0] before 0" in out and "[rank 1] before 1" in out
    # The raising rank's traceback once, under a header naming it, as Python shows it.
    assert out.count("--- rank 1 raised ValueError ---") == 1
    assert "ValueError: bad batch on 1" in out and "[rank 1] ValueError" not in out
    assert "Engine Exception" not in out and ":execute]" not in out


def test_every_failing_rank_is_named(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    result = shell.run_cell("%%dist\nraise KeyError(rank)\n")
    out = capsys.readouterr().out
    assert isinstance(result.error_in_exec, RankError)
    assert sorted(f.rank for f in result.error_in_exec.failures) == [0, 1]
    first = result.error_in_exec.failures[0].rank
    assert f"[rank {1 - first}] also raised KeyError: {1 - first}" in out


@pytest.mark.timeout(40)
def test_interrupt_stops_a_long_cell(cluster2: Any) -> None:
    caught: list[BaseException] = []

    def cell() -> None:
        try:
            run_on_ranks(cluster2, "import time\ntime.sleep(60)")
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            caught.append(e)

    worker = threading.Thread(target=cell, daemon=True)
    t0 = time.monotonic()
    worker.start()
    time.sleep(1.0)  # let both ranks enter the sleep
    cluster2.interrupt()
    worker.join(20)
    assert not worker.is_alive(), "the cell was not interrupted"
    assert time.monotonic() - t0 < 20
    assert len(caught) == 1 and isinstance(caught[0], RankError)
    assert {f.error.ename for f in caught[0].failures} == {"KeyboardInterrupt"}
    still_works(cluster2)


@pytest.mark.timeout(40)
def test_timeout_interrupts_every_rank(shell: Any, cluster2: Any) -> None:
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="longer than 1.0 s; interrupted every rank"):
        shell.run_cell_magic("dist", "--timeout 1", "import time\ntime.sleep(60)")
    assert time.monotonic() - t0 < 15
    still_works(cluster2)


@pytest.mark.timeout(60)
def test_timeout_interrupts_a_rank_that_began_the_cell_late(shell: Any, cluster2: Any) -> None:
    # Rank 1 is still busy with an earlier request when the cell times out: the first
    # SIGINT ends that request, and the cell begins only afterwards on rank 1.
    earlier = cluster2.client[cluster2.engine_ids([1])].execute(
        "import time\ntime.sleep(3)", block=False
    )
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="interrupted every rank"):
        shell.run_cell_magic("dist", "--timeout 1", "import time\ntime.sleep(60)")
    assert time.monotonic() - t0 < 20
    earlier.wait(10)
    still_works(cluster2)


def test_collective_on_some_ranks_names_the_absent_ones(shell: Any, cluster2: Any) -> None:
    # A group with a short timeout, made on every rank, so the wait is 3 s, not 30.
    shell.run_cell_magic(
        "dist", "", "import datetime\nshort = dist.new_group(timeout=datetime.timedelta(seconds=3))"
    )
    result = shell.run_cell("%%dist --ranks 0\nt = torch.ones(1)\ndist.all_reduce(t, group=short)")
    error = result.error_in_exec
    assert isinstance(error, RankError), error
    message = str(error)
    assert "rank 1 was not in this cell (--ranks 0)" in message, message
    assert "waits for every rank" in message and "run it on every rank" in message
    assert error.hint in error._render_traceback_()
    # The group is whole again for the next cell.
    shell.run_cell_magic("dist", "", "t = torch.ones(1)\ndist.all_reduce(t)\nassert t.item() == 2")
