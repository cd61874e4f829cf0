"""A collective mismatch is named in seconds, not after the group's 30 s timeout.

Real 2-rank gloo cluster: one rank skips an all_reduce, or calls another op at the same
place. The error says which rank waits in which collective, which rank left after what,
and the fix; the group is re-made and the next cell's all_reduce works.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from dist_notebook.cluster.onranks.mismatch import FIX, CollectiveMismatch

pytestmark = pytest.mark.timeout(120)

SKIP = """t = torch.ones(1)
dist.all_reduce(t)
if rank == 0:
    dist.all_reduce(t)
"""
OTHER_OP = """t = torch.ones(1)
if rank == 0:
    dist.all_reduce(t)
else:
    dist.broadcast(t, 0)
"""
# Seconds the whole case may take: the group's timeout is 30 s.
WITHIN = 10.0


def seq_now(shell: Any) -> int:
    """The default group's collective counter on rank 0 (the same on every rank)."""
    shell.run_cell_magic(
        "dist", "--ranks 0", "_seq = dist.group.WORLD._get_sequence_number_for_group()"
    )
    result = shell.run_line_magic("dist_pull", "_seq")
    return int(result[0] if isinstance(result, list) else result)


def still_works(shell: Any) -> None:
    result = shell.run_cell("%%dist\nt = torch.ones(1)\ndist.all_reduce(t)\nassert t.item() == 2")
    assert result.error_in_exec is None, result.error_in_exec


def run_mismatch(shell: Any, cell: str) -> tuple[CollectiveMismatch, float]:
    t0 = time.monotonic()
    result = shell.run_cell("%%dist\n" + cell)
    took = time.monotonic() - t0
    error = result.error_in_exec
    assert isinstance(error, CollectiveMismatch), error
    print(f"mismatch named after {took:.2f} s:\n{error}", file=sys.__stderr__)
    return error, took


def check_skip(shell: Any, capsys: pytest.CaptureFixture[str]) -> float:
    before = seq_now(shell)
    capsys.readouterr()
    error, took = run_mismatch(shell, SKIP)
    message = str(error)
    waits = (
        f"rank 0 waits in collective #{before + 2} (all_reduce, line 4 of this cell) "
        "of the default group"
    )
    assert message.startswith("collective mismatch: " + waits), message
    assert "which rank 1 never called: rank 1 left the cell" in message, message
    assert f"after collective #{before + 1} (all_reduce)" in message, message
    assert FIX in message and "group was re-made" in message
    out = capsys.readouterr().out
    assert waits in out and "Timed out" not in out, out
    assert took < WITHIN, f"{took:.1f} s to name the mismatch"
    still_works(shell)
    return took


def test_a_rank_that_skips_an_all_reduce(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    check_skip(shell, capsys)


def test_the_op_is_named_after_the_group_was_re_made(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The flight recorder keeps the entries of a group the cluster re-made, under the
    same name and with higher numbers than the new group's: the op of the new group's
    collective must still be found (CI named none, after a session of earlier tests)."""
    many = "t = torch.ones(1)\nfor _ in range(12):\n    dist.all_reduce(t)"
    assert shell.run_cell("%%dist\n" + many).error_in_exec is None
    run_mismatch(shell, SKIP)  # the group is re-made: its numbers start again
    check_skip(shell, capsys)


def test_a_rank_that_calls_another_op(shell: Any, cluster2: Any) -> None:
    check_other_op(shell)


def test_another_op_under_two_cpu_hogs(shell: Any, cluster2: Any, cpu_hogs: Any) -> None:
    check_other_op(shell)


def check_other_op(shell: Any) -> None:
    before = seq_now(shell)
    error, took = run_mismatch(shell, OTHER_OP)
    message = str(error)
    n = before + 1
    assert (
        f"rank 0 waits in collective #{n} (all_reduce, line 3 of this cell) of the default "
        "group, but rank 1 waits in #" + f"{n} as broadcast (line 5 of this cell)"
    ) in message, message
    first, debug = error._render_traceback_()[0].split("\n")
    assert first == message  # the mismatch leads the traceback, one line
    assert debug.startswith("%dist_debug opens pdb where rank "), debug  # then how to debug
    assert FIX in message
    assert took < WITHIN, f"{took:.1f} s to name the mismatch"
    still_works(shell)


def test_skip_under_two_cpu_hogs(
    shell: Any, cluster2: Any, cpu_hogs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    check_skip(shell, capsys)


def test_a_rank_that_leaves_early_without_a_mismatch_is_left_alone(
    shell: Any, cluster2: Any
) -> None:
    # Rank 1 is done at once; rank 0 computes for 2.5 s with no collective: no error.
    # Then rank 0 waits in an all_reduce while rank 1 sleeps before joining it: no error.
    cell = (
        "import time\nif rank == 0:\n    time.sleep(2.5)\n"
        "t = torch.ones(1)\nif rank == 1:\n    time.sleep(2.5)\ndist.all_reduce(t)\n"
        "assert t.item() == 2"
    )
    result = shell.run_cell("%%dist\n" + cell)
    assert result.error_in_exec is None, result.error_in_exec
