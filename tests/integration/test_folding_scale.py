"""Output at scale, on real local CPU clusters of 16 ranks and (slow) 64 ranks: a line every
rank prints is one line, lines that differ one per content in rank order, the same error
one traceback under its ranks, different errors once each; ``--no-fold`` a line per rank;
``%dist_cluster status`` a row per node (``--all``: per rank), naming its slowest rank after a run.

A line waits long enough here (``held``) for every rank's same line, so that a busy
machine cannot split a fold: the test is of what folds, tests/magics/test_folding.py
of the default wait. At 64 ranks on a 2-core machine: 113 s for the whole module, start
(18-25 s) included. Under a load of 70-110 (other suites beside it) the first cells' output
of some ranks came more than 2 s after their replies, later than the kernel waits for it
(``ar.wait_for_output(2)`` in cluster/onranks/execute.py), and was lost, folded or not: these
tests then fail, rightly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import session_of

from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.cluster.onranks.execute import RankError
from dist_notebook.cluster.onranks.tracebacks import rank_set
from dist_notebook.magics import folding

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module", params=[16, pytest.param(64, marks=pytest.mark.slow)])
def cluster(request: pytest.FixtureRequest, shell: Any) -> Iterator[DistCluster]:
    """A cluster of 16 (or 64) ranks, the shell's current one for the module's tests."""
    session = session_of(shell)
    saved = session.cluster
    # A busy 2-core machine can take minutes to register 64 engines: a longer start.
    own = DistCluster(ClusterSpec(n=request.param, threads=1, start_timeout=400))
    t0 = time.monotonic()
    try:
        own.start_sync()
        print(f"{own.n} ranks ready in {time.monotonic() - t0:.1f} s")
        session.cluster = own
        yield own
    finally:
        session.cluster = saved
        own.stop_sync()
        print(f"{own.n} ranks: {time.monotonic() - t0:.1f} s from start to stopped")


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOLD", "EXTEND", "LONGEST"):
        monkeypatch.setattr(folding, name, 60.0)


def run(shell: Any, line: str, cell: str, capsys: pytest.CaptureFixture[str]) -> Any:
    capsys.readouterr()
    result = shell.run_cell(f"%%dist {line}\n{cell}")
    return result, capsys.readouterr().out


def test_a_print_on_every_rank_is_one_line(
    shell: Any, cluster: DistCluster, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    n = cluster.n
    cell = "t = torch.ones(1)\ndist.all_reduce(t)\nprint('SUM', int(t))"
    result, out = run(shell, "", cell, capsys)
    assert result.success, result.error_in_exec
    assert out == f"[ranks 0-{n - 1}] SUM {n}\n", out


def test_different_lines_once_per_content_in_rank_order(
    shell: Any, cluster: DistCluster, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    n = cluster.n
    cell = "print('parity', rank % 2)\nprint('rank', rank)\nprint('done')"
    result, out = run(shell, "", cell, capsys)
    assert result.success, result.error_in_exec
    assert out.splitlines() == [
        f"[ranks {rank_set(range(0, n, 2))}] parity 0",
        f"[ranks {rank_set(range(1, n, 2))}] parity 1",
        *(f"[rank {r}] rank {r}" for r in range(n)),
        f"[ranks 0-{n - 1}] done",
    ]


def test_the_same_error_everywhere_is_one_traceback(
    shell: Any, cluster: DistCluster, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    n = cluster.n
    result, out = run(shell, "", "raise ValueError('bad batch')", capsys)
    assert isinstance(result.error_in_exec, RankError)
    assert out.count(f"--- ranks 0-{n - 1} raised ValueError ---") == 1, out
    assert out.count("ValueError: bad batch") == 1, out
    assert "[rank" not in out, out


def test_different_errors_once_each_with_their_ranks(
    shell: Any, cluster: DistCluster, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    n = cluster.n
    result, out = run(shell, "", "raise ValueError(f'batch {rank % 4}')", capsys)
    error = result.error_in_exec
    assert isinstance(error, RankError)
    first = error.rank % 4
    assert out.count(f"--- ranks {rank_set(range(first, n, 4))} raised ValueError ---") == 1
    for value in {0, 1, 2, 3} - {first}:
        line = f"[ranks {rank_set(range(value, n, 4))}] also raised ValueError: batch {value}"
        assert out.count(line) == 1, out
    assert len(out.splitlines()) < 12  # not a line per rank


def test_no_fold_is_a_line_per_rank(
    shell: Any, cluster: DistCluster, held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    n = cluster.n
    result, out = run(shell, "--no-fold", "print('SUM', world_size)", capsys)
    assert result.success, result.error_in_exec
    assert sorted(out.splitlines()) == sorted(f"[rank {r}] SUM {n}" for r in range(n))
    result, out = run(shell, "--no-fold", "raise ValueError('bad batch')", capsys)
    error = result.error_in_exec
    assert isinstance(error, RankError)
    assert out.count(f"--- rank {error.rank} raised ValueError ---") == 1
    assert out.count("raised the same ValueError") == n - 1


def test_status_is_a_row_per_node(
    shell: Any, cluster: DistCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    n = cluster.n
    capsys.readouterr()
    shell.run_line_magic("dist_cluster", "status")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f", {n} ranks (status --all: a row per rank)"), lines
    assert lines[1].split() == ["node", "host", "ranks", "count", "devices", "backend", "states"]
    host = cluster.ranks[0].host
    assert lines[2].split() == ["0", host, f"0-{n - 1}", str(n), "cpu", "gloo", str(n), "idle"]
    assert len(lines) == 3
    shell.run_line_magic("dist_cluster", "status --all")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + n and str(cluster.ranks[-1].pid) in lines[-1]


def test_status_by_node_names_the_slowest_rank_of_a_run(
    shell: Any, cluster: DistCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a run, each node's row names its slowest rank (the most time outside the
    all-reduce, from the run's summary): here the rank that sleeps 15 x longer a step."""
    n = cluster.n
    slow = n - 3
    cell = (
        "%%dist_train --name nodes --no-dashboard\nimport time\nfor step in range(10):\n"
        f"    time.sleep(0.3 if rank == {slow} else 0.02)\n    report(step=step, loss=1.0)\n"
    )
    result = shell.run_cell(cell)
    assert result.success, result.error_in_exec
    capsys.readouterr()
    shell.run_line_magic("dist_cluster", "status")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("; slowest: in last run nodes"), lines
    assert lines[1].split()[-1] == "slowest", lines
    row = lines[2].split()
    assert row[:3] == ["0", cluster.ranks[0].host, f"0-{n - 1}"], lines
    assert row[-1] == str(slow) or row[-2:] == [str(slow), "straggler"], lines
