"""A flood of identical lines folds in time linear in the output and never holds the
kernel: on the session's real 2-rank CPU cluster through the shell, and on the folding
itself with the clock given (the bounds on what waits, the cost of a far-ahead rank).

Before, a line looked at every waiting group of its text and, for each, at the chain of
groups after it: 300 identical lines took seconds, 10,000 wedged the kernel for good.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from dist_notebook.magics import folding
from dist_notebook.magics.folding import Folder

pytestmark = pytest.mark.timeout(300)

LINE = "x" * 99  # a 100-character line with its newline


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines wait for the other rank's same line however busy the machine (the fold is
    what is tested here, not the default wait)."""
    for name in ("HOLD", "EXTEND", "LONGEST"):
        monkeypatch.setattr(folding, name, 30.0)


@pytest.mark.parametrize("lines", [300, 3000, 10_000])
def test_identical_lines_on_every_rank_show_folded_in_seconds(
    shell: Any, cluster2: Any, held: None, capsys: pytest.CaptureFixture[str], lines: int
) -> None:
    capsys.readouterr()
    t0 = time.monotonic()
    result = shell.run_cell(f"%%dist\nfor _ in range({lines}):\n    print({LINE!r})")
    took = time.monotonic() - t0
    out = capsys.readouterr().out
    assert result.success, result.error_in_exec
    assert out.splitlines() == [f"[ranks 0,1] {LINE}"] * lines, out[-300:]
    # Seconds, beside other work on 2 shared cores (10,000 lines: ~2 s quiet); was minutes.
    assert took < 30, f"{lines} lines: {took:.1f} s"
    # And the kernel is free for the next cell at once.
    t0 = time.monotonic()
    result = shell.run_cell("%%dist\nprint('next', rank)")
    assert result.success, result.error_in_exec
    assert time.monotonic() - t0 < 15
    assert sorted(capsys.readouterr().out.splitlines()) == ["[rank 0] next 0", "[rank 1] next 1"]


def fold_all(folder: Folder, chunks: list[tuple[int, str]]) -> list[Any]:
    out = []
    for rank, text in chunks:
        folder.add(rank, "stdout", text, 0.0)
        out += folder.ready(0.0)
    return out + folder.close(0.0)


def test_the_folding_of_identical_lines_is_linear() -> None:
    """Twice the lines cost about twice the time (it was eight times: cubic)."""
    took = {}
    for lines in (10_000, 20_000):
        text = (LINE + "\n") * lines
        t0 = time.perf_counter()
        groups = fold_all(Folder(range(2)), [(0, text), (1, text)])
        took[lines] = time.perf_counter() - t0
        assert [g.ranks for g in groups] == [[0, 1]] * lines
    assert took[10_000] < 2, took  # 300 lines took ~1 s before
    assert took[20_000] < 6 * took[10_000] + 0.5, took


def test_what_waits_is_bounded_and_shows_early_past_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rank far ahead of the others never makes the folder hold more than MAX_GROUPS
    groups or MAX_CHARS characters: the earliest show at once, each rank's lines still
    once each and in order."""
    monkeypatch.setattr(folding, "MAX_GROUPS", 1000)
    monkeypatch.setattr(folding, "MAX_CHARS", 50_000)
    folder = Folder(range(2), hold=60, extend=60, longest=60)
    shown = []
    for i in range(5000):  # distinct lines: nothing of rank 1 to fold with
        folder.add(0, "stdout", f"step {i}\n", 0.0)
        assert len(folder._waiting) <= 1000
        shown += folder.ready(0.0)
    assert len(shown) >= 4000  # shown before any deadline, though rank 1 printed nothing
    assert [g.text for g in shown] == [f"step {i}\n" for i in range(len(shown))]
    folder.add(1, "stdout", "x" * 200_000, 0.0)  # an endless line of one rank: shown
    assert folder.next_deadline() == 0.0
    assert [g.ranks for g in folder.ready(0.0)][-1:] == [[1]]
    assert folder._chars <= 50_000


def test_a_rank_far_behind_still_folds_and_costs_linear_time() -> None:
    """Rank 1 prints a line of its own first, then the 5,000 'tick' rank 0 printed: its
    first tick must be placed after its own line (one look at the 5,000 groups between),
    then every tick folds in one step."""
    ticks = "tick\n" * 5000
    t0 = time.perf_counter()
    groups = fold_all(Folder(range(2)), [(0, ticks), (1, "mine\n" + ticks)])
    took = time.perf_counter() - t0
    assert [g.text for g in groups] == ["mine\n"] + ["tick\n"] * 5000
    assert [g.ranks for g in groups[1:]] == [[0, 1]] * 5000
    assert took < 2, took
