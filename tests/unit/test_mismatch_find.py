"""What mismatch.find concludes from one look at every rank (the ranks' answers as the
engines' control thread gives them; the real cluster case is tests/integration/test_mismatch.py)."""

from __future__ import annotations

from typing import Any

from dist_notebook.cluster.onranks.mismatch import FIX, find


def shot(seq: int, op: str | None = None, group: str = "0", line: str = "") -> dict[str, Any]:
    waiting = {"op": op, "group": group, "line": line} if op else None
    return {
        "seq": {"0": seq, "1": 0},
        "groups": {"0": [0, 1, 2], "1": [0, 2]},
        "default": "0",
        "waiting": waiting,
        "ops": {"0": {str(seq): "all_reduce"}},
    }


def test_a_rank_waits_in_a_collective_a_rank_that_left_never_reached() -> None:
    shots = {0: shot(6, "all_reduce", line="line 4 of this cell"), 1: shot(5), 2: shot(5)}
    text = find(shots, {}, {1: 0.0}, lag={1: 0.4})
    assert text is not None
    assert text.startswith(
        "collective mismatch: rank 0 waits in collective #6 (all_reduce, line 4 of this "
        "cell) of the default group, which rank 1 never called: rank 1 left the cell after "
        "collective #5 (all_reduce) (0.4 s earlier)"
    ), text
    assert FIX in text


def test_a_rank_that_left_after_the_same_collective_is_no_mismatch() -> None:
    # Rank 1 left after #6 (an async op it did not wait for): rank 0's #6 can complete.
    assert find({0: shot(6, "all_reduce"), 1: shot(6)}, {}, {1: 0.0}) is None


def test_a_rank_not_in_the_waiting_group_is_no_mismatch() -> None:
    shots = {0: shot(6, "all_reduce", group="1"), 1: shot(5), 2: shot(5)}
    shots[0]["seq"]["1"] = 3
    shots[2]["seq"]["1"] = 2
    # Rank 1 is not in group 1; rank 2 is and has not left: nothing certain.
    assert find(shots, {}, {1: 0.0}) is None
    text = find(shots, {}, {1: 0.0, 2: 0.0})
    assert text is not None and "group 1 (ranks 0,2)" in text and "rank 2 never" in text


def test_different_ops_must_be_seen_twice() -> None:
    shots = {0: shot(3, "all_reduce"), 1: shot(3, "broadcast")}
    assert find(shots, {}, {}) is None  # one look: the ranks may be passing through
    text = find(shots, shots, {})
    assert text is not None
    assert "rank 0 waits in collective #3 (all_reduce) of the default group" in text
    assert "but rank 1 waits in #3 as broadcast" in text


def test_ranks_busy_outside_collectives_are_no_mismatch() -> None:
    shots = {0: shot(3, "all_reduce"), 1: shot(2)}  # rank 1 computes, then joins
    assert find(shots, shots, {}) is None


def test_a_rank_with_no_group_says_nothing() -> None:
    shots = {0: shot(3, "all_reduce"), 1: {"why": "this rank has no process group"}}
    assert find(shots, {}, {1: 0.0}) is None
