"""A ``# comment`` after a line magic, or after a cell magic's first line, is a comment
as in Python, never an argument; a ``#`` in quotes is still an argument. Checked on
the session's real 2-rank CPU cluster, through the shell as a notebook cell runs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.utils.capture import capture_output

pytestmark = pytest.mark.timeout(120)


def test_cluster_status_with_a_comment(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "%dist_cluster: argument count: '#' is not a whole number".
    capsys.readouterr()
    result = shell.run_cell("%dist_cluster status   # the table of ranks, don't start one")
    assert result.success, result.error_in_exec
    assert f"cluster {cluster2.id}: ready" in capsys.readouterr().out


def test_start_with_a_comment_reaches_the_start(shell: Any, cluster2: Any) -> None:
    # The comment is gone, so the start itself answers: a cluster of another spec runs
    # (the same spec again would be reused).
    result = shell.run_cell("%dist_cluster start -n 3 --cpu   # one rank per visible GPU")
    assert "use %dist_cluster restart, or %dist_cluster stop first" in str(result.error_in_exec)


def test_cell_magic_first_line_with_a_comment(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    result = shell.run_cell(
        "%%dist --ranks 1   # only rank 1\nimport torch.distributed as d\n"
        "print('I am', d.get_rank())\n"
    )
    assert result.success, result.error_in_exec
    out = capsys.readouterr().out
    assert "I am 1" in out and "I am 0" not in out


def test_push_and_pull_with_comments(shell: Any, cluster2: Any) -> None:
    shell.user_ns["lr_of_test"] = 0.25
    shell.run_line_magic("dist_push", "lr_of_test   # send the learning rate")
    assert shell.run_line_magic("dist_pull", "lr_of_test * 2  # doubled") == 0.5
    values = shell.run_line_magic("dist_pull", "lr_of_test --all  # from every rank")
    assert values == {0: 0.25, 1: 0.25}


def test_quoted_hash_is_part_of_the_expression(shell: Any, cluster2: Any) -> None:
    assert shell.run_line_magic("dist_pull", "'#' + 'x' --rank 1  # a comment") == "#x"


def test_dist_run_passes_no_comment_to_the_script(
    shell: Any, cluster2: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "argv.py"
    script.write_text("import sys\nprint('argv', sys.argv[1:])\n")
    capsys.readouterr()
    shell.run_line_magic("dist_run", f"{script} --lr 0.1 '#kept'   # three arguments")
    out = capsys.readouterr().out
    assert out.count("argv ['--lr', '0.1', '#kept']") == 2, out


def test_dist_train_with_a_comment(shell: Any, cluster2: Any) -> None:
    cell = "from dist_notebook import report\nfor i in range(3):\n    report(step=i, loss=1.0)\n"
    magics = shell.magics_manager.registry["TrainMagics"]
    with capture_output():
        shell.run_cell_magic("dist_train", "--steps 3 --no-dashboard  # three steps", cell)
    assert magics.last_result.state.value == "succeeded"
    assert magics.last_result.records == 6
    # The line form: the call runs on every rank, the comment does not.
    shell.run_cell(
        "%%dist\nimport torch.distributed as d\ndef three():\n"
        "    from dist_notebook import report\n"
        "    for i in range(3):\n        report(step=i, loss=1.0)\n"
    )
    with capture_output():
        shell.run_line_magic("dist_train", "--no-dashboard three()  # line form")
    assert magics.last_result.state.value == "succeeded"
    assert magics.last_result.records == 6


def test_dist_runs_with_a_comment(no_cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    result = no_cluster.run_cell("%dist_runs --state failed  # only the failed ones")
    assert result.success, result.error_in_exec
