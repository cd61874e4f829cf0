"""A failure on the ranks reads like Python's: one traceback, one line per other rank."""

from __future__ import annotations

from ipyparallel.error import RemoteError

from dist_notebook.cluster.execute import RankError, RankOutput

TB = "Traceback (most recent call last):\n  Cell In[1], line 3\nValueError: bad batch\n"


def failure(rank: int, ename: str, evalue: str, tb: str = "") -> RankOutput:
    return RankOutput(rank=rank, error=RemoteError(ename, evalue, tb))


def test_first_rank_traceback_once_and_why_the_others_stopped() -> None:
    error = RankError(
        [
            failure(1, "ValueError", "bad batch", TB),
            failure(0, "RuntimeError", "Connection closed by peer [127.0.0.1]:1234"),
            failure(2, "ValueError", "bad batch", TB),
            failure(3, "ValueError", "other batch", TB),
        ],
        [0, 1, 2, 3],
    )
    lines = error._render_traceback_()
    assert lines[0] == "--- rank 1 raised ValueError ---"
    assert lines[1:4] == TB.rstrip("\n").splitlines()
    assert lines[4:] == [
        "[rank 0] released after rank 1 raised ValueError (here: RuntimeError: Connection"
        " closed by peer [127.0.0.1]:1234)",
        "[rank 2] raised the same ValueError",
        "[rank 3] also raised ValueError: other batch",
    ]
    assert not any("Engine Exception" in line or ":execute]" in line for line in lines)


def test_a_dead_rank_names_itself_and_frees_the_others() -> None:
    died = "rank 0 (pid 7, host vm) died: signal SIGKILL; run %dist_cluster restart to replace it"
    error = RankError([failure(0, "RankDied", died), failure(1, "RuntimeError", "reset")], [0, 1])
    assert error._render_traceback_() == [
        f"[rank 0] {died}",
        "[rank 1] released after rank 0 died (here: RuntimeError: reset)",
    ]
