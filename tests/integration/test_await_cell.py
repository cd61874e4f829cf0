"""A top-level ``await`` in a cell on the ranks runs there, as in a notebook's own kernel
(IPython's autoawait): before, the cell never returned (plain ipyparallel hangs the same
way) and the next cell waited behind it."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(240)


def timed_cell(shell: Any, magic: str, line: str, cell: str) -> tuple[Any, float]:
    started = time.monotonic()
    value = shell.run_cell_magic(magic, line, cell)
    return value, time.monotonic() - started


def test_top_level_await_returns_on_every_rank(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = (
        "import asyncio\n"
        "await asyncio.sleep(0.2)\n"
        "got = await asyncio.gather(asyncio.sleep(0.1, result=rank), asyncio.sleep(0, result=7))\n"
        "print('awaited', got)\n"
    )
    _, took = timed_cell(shell, "dist", "--timeout 60", cell)
    out = capsys.readouterr().out
    assert "awaited [0, 7]" in out and "awaited [1, 7]" in out, out
    assert took < 30
    # The ranks keep what the cell made, and the next cell runs at once.
    assert shell.run_line_magic("dist_pull", "got --all") == {0: [0, 7], 1: [1, 7]}


def test_an_awaited_error_is_the_ranks_error(shell: Any, cluster2: Any) -> None:
    from dist_notebook import RankError

    cell = (
        "import asyncio\n"
        "async def boom():\n"
        "    raise ValueError('from a coroutine')\n"
        "await boom()\n"
    )
    with pytest.raises(RankError, match="from a coroutine"):
        shell.run_cell_magic("dist", "--timeout 60", cell)
    assert shell.run_line_magic("dist_pull", "rank + 1 --rank 1") == 2


def test_await_in_a_training_cell(shell: Any, cluster2: Any) -> None:
    cell = (
        "import asyncio\n"
        "for step in range(3):\n"
        "    await asyncio.sleep(0.01)\n"
        "    report(step=step, loss=1.0 / (step + 1))\n"
    )
    started = time.monotonic()
    shell.run_cell_magic("dist_train", "--name awaited --no-dashboard --timeout 60", cell)
    assert time.monotonic() - started < 60
    result = shell.magics_manager.registry["TrainMagics"].last_result
    assert result.state.value == "succeeded" and result.records == 6, result
