"""%%dist folds output across ranks: a line many ranks print shows once with their ranks,
lines that differ once per content, the same error once; ``--no-fold`` keeps a line per
rank. On the session's real 2-rank CPU cluster, through the shell as a notebook runs it.

Most tests give a line long enough (``held``) to wait for the other rank's same line, so
that a busy machine cannot split a fold; what the default wait does is tested on its own
(a line shows before the cell ends).
"""

from __future__ import annotations

import io
import sys
import time
from typing import Any

import pytest

from dist_notebook.cluster.onranks.execute import RankError
from dist_notebook.magics import folding

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOLD", "EXTEND", "LONGEST"):
        monkeypatch.setattr(folding, name, 20.0)


def run(shell: Any, line: str, cell: str, capsys: pytest.CaptureFixture[str]) -> Any:
    capsys.readouterr()
    result = shell.run_cell(f"%%dist {line}\n{cell}")
    out = capsys.readouterr()
    return result, out.out, out.err


def test_identical_output_prints_once(
    shell: Any, cluster2: Any, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    result, out, err = run(
        shell, "", "import sys\nprint('SUM', world_size)\nprint('warn', file=sys.stderr)", capsys
    )
    assert result.success, result.error_in_exec
    assert out == "[ranks 0,1] SUM 2\n"
    assert err == "[ranks 0,1] warn\n"


def test_different_lines_each_once_in_rank_order(
    shell: Any, cluster2: Any, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = "print('loss', 0.5 + rank)\nprint('epoch done')\nrank * 0 + 7"
    result, out, _ = run(shell, "", cell, capsys)
    assert result.success, result.error_in_exec
    assert out == (
        "[rank 0] loss 0.5\n[rank 1] loss 1.5\n[ranks 0,1] epoch done\nOut[ranks 0,1]: 7\n"
    )


def test_identical_displays_show_once(
    shell: Any, cluster2: Any, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = (
        "from IPython.display import display\n"
        "display({'text/plain': 'same table'}, raw=True)\n"
        "display({'text/plain': f'table of {rank}'}, raw=True)"
    )
    result, out, _ = run(shell, "", cell, capsys)
    assert result.success, result.error_in_exec
    assert out.count("same table") == 1, out
    assert out.count("table of 0") == 1 and out.count("table of 1") == 1, out
    assert out.index("same table") < out.index("table of 0") < out.index("table of 1"), out


def test_no_fold_keeps_a_line_per_rank(
    shell: Any, cluster2: Any, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    result, out, _ = run(shell, "--no-fold", "print('SUM', world_size)\nworld_size", capsys)
    assert result.success, result.error_in_exec
    lines = out.splitlines()
    assert sorted(lines[:2]) == ["[rank 0] SUM 2", "[rank 1] SUM 2"]
    assert lines[2:] == ["Out[rank 0]: 2", "Out[rank 1]: 2"]


def test_the_same_error_on_every_rank_shows_once(
    shell: Any, cluster2: Any, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    result, out, _ = run(shell, "", "print('before')\nraise ValueError('bad batch')", capsys)
    assert isinstance(result.error_in_exec, RankError)
    # The output held back shows first. (A regroup may add the start's progress line.)
    header = "--- ranks 0,1 raised ValueError ---"
    assert out.count(header) == 1, out
    assert out.index("[ranks 0,1] before\n") < out.index(header), out
    assert out.count("ValueError: bad batch") == 1, out
    assert "[rank " not in out.split("---", 1)[1], out  # no line per rank after the traceback


def test_different_errors_each_once(
    shell: Any, cluster2: Any, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    result, out, _ = run(shell, "", "raise ValueError(f'batch {rank}')", capsys)
    error = result.error_in_exec
    assert isinstance(error, RankError)
    first = error.rank
    assert out.count(f"--- rank {first} raised ValueError ---") == 1, out
    assert out.count(f"[rank {1 - first}] also raised ValueError: batch {1 - first}") == 1, out


def test_no_fold_errors_a_line_per_rank(
    shell: Any, cluster2: Any, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    result, out, _ = run(shell, "--no-fold", "raise ValueError('bad batch')", capsys)
    error = result.error_in_exec
    assert isinstance(error, RankError)
    assert out.count(f"--- rank {error.rank} raised ValueError ---") == 1, out
    assert out.count(f"[rank {1 - error.rank}] raised the same ValueError") == 1, out


class Timed(io.StringIO):
    """stdout that notes when each piece was written."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.writes.append((time.monotonic(), text))
        return super().write(text)


def test_a_line_only_one_rank_prints_shows_while_the_cell_runs(
    shell: Any, cluster2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    timed = Timed()
    monkeypatch.setattr(sys, "stdout", timed)
    cell = "%%dist\nimport time\nif rank == 0:\n    print('early')\ntime.sleep(4)\n"
    result = shell.run_cell(cell)
    ended = time.monotonic()
    monkeypatch.undo()
    assert result.success, result.error_in_exec
    [(at, text)] = [(t, w) for t, w in timed.writes if "early" in w]
    assert text == "[rank 0] early\n"
    # Shown at its deadline (HOLD, 0.5 s), not held for rank 1 until the cell's end.
    assert ended - at > 2, ended - at
