"""Every mistake a user can make with ``%%dist_train`` gets a UsageError naming the fix."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError


def test_empty_cell(shell: Any) -> None:
    with pytest.raises(UsageError, match="the cell is empty; write the training loop in it"):
        shell.run_cell_magic("dist_train", "--steps 10", "  \n\n")


def test_line_form_without_an_expression(shell: Any) -> None:
    with pytest.raises(
        UsageError, match=r"give a call to run, e\.g\. %dist_train train\(epochs=3\)"
    ):
        shell.run_line_magic("dist_train", "--name x")


def test_words_after_the_flags_of_a_cell(shell: Any) -> None:
    with pytest.raises(UsageError, match="unexpected 'train'; flags start with --"):
        shell.run_cell_magic("dist_train", "--steps 3 train", "pass")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--steps 0", "--steps: 0 must be 1 or more"),
        ("--steps ten", "--steps: 'ten' is not a whole number"),
        ("--timeout -1", "--timeout: '-1' must be a positive number of seconds"),
        ("--ranks 0,0", "--ranks: '0,0' lists a number twice"),
        ("--epochs 3", "unrecognized arguments: --epochs"),
    ],
)
def test_bad_flags(shell: Any, line: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as raised:
        shell.run_cell_magic("dist_train", line, "pass")
    assert "usage: %%dist_train" in str(raised.value)


def test_no_cluster(no_cluster: Any) -> None:
    with pytest.raises(
        UsageError, match="no cluster is running: start one with %dist_cluster start"
    ):
        no_cluster.run_cell_magic("dist_train", "", "pass")
    with pytest.raises(UsageError, match="no cluster is running"):
        no_cluster.run_line_magic("dist_train", "train()")


def test_rank_outside_the_cluster(shell: Any, cluster2: Any) -> None:
    with pytest.raises(
        UsageError, match=r"unknown rank 7: this cluster has ranks 0\.\.1; fix --ranks"
    ):
        shell.run_cell_magic("dist_train", "--ranks 7", "pass")


def test_dist_runs_refuses_unknown_flags(shell: Any) -> None:
    with pytest.raises(UsageError, match="unrecognized arguments: --all"):
        shell.run_line_magic("dist_runs", "--all")
