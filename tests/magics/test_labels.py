"""Output of %%dist is labelled by torch rank; identical lines fold (tests/magics/test_folding.py),
--no-stream folds identical output at the end."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.timeout(60)


def run(shell: Any, line: str, cell: str, capsys: pytest.CaptureFixture[str]) -> Any:
    capsys.readouterr()
    shell.run_cell_magic("dist", line, cell)
    return capsys.readouterr()


def test_streamed_output_is_labelled_per_line(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(shell, "", "print(f'hello from {rank}')\nprint('second line')", capsys).out
    lines = out.splitlines()
    for r in (0, 1):
        assert f"[rank {r}] hello from {r}" in lines
    assert lines.count("[ranks 0,1] second line") == 1  # the same line from both: once


def test_stderr_is_labelled_too(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    err = run(shell, "", "import sys\nprint('warn', rank, file=sys.stderr)", capsys).err
    assert "[rank 0] warn 0" in err and "[rank 1] warn 1" in err


def test_no_stream_folds_identical_output(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(shell, "--no-stream", "print('same everywhere')", capsys).out
    assert out == "[ranks 0,1]\nsame everywhere\n"


def test_no_stream_keeps_different_output_apart(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(shell, "--no-stream", "print('r', rank)", capsys).out
    assert out == "[rank 0]\nr 0\n[rank 1]\nr 1\n"


def test_last_expression_is_shown_per_rank_and_folded(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(shell, "", "world_size * 10", capsys).out == "Out[ranks 0,1]: 20\n"
    assert run(shell, "", "rank + 100", capsys).out == "Out[rank 0]: 100\nOut[rank 1]: 101\n"


def test_status_shows_the_ranks(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    shell.run_line_magic("dist_cluster", "status")
    out = capsys.readouterr().out
    assert f"cluster {cluster2.id}: ready" in out
    for r in cluster2.ranks:
        assert str(r.pid) in out
