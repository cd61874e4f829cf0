"""A failure on the ranks reads like Python's: one traceback, one line per other rank."""

from __future__ import annotations

from ipyparallel.error import RemoteError

from dist_notebook.cluster.onranks.execute import RankError, RankOutput
from dist_notebook.cluster.onranks.tracebacks import render, renumber

TB = "Traceback (most recent call last):\n  Cell In[1], line 3\nValueError: bad batch\n"


def failure(rank: int, ename: str, evalue: str, tb: str = "") -> RankOutput:
    return RankOutput(rank=rank, error=RemoteError(ename, evalue, tb))


def four_ranks() -> RankError:
    return RankError(
        [
            failure(1, "ValueError", "bad batch", TB),
            failure(0, "RuntimeError", "Connection closed by peer [127.0.0.1]:1234"),
            failure(2, "ValueError", "bad batch", TB),
            failure(3, "ValueError", "other batch", TB),
        ],
        [0, 1, 2, 3],
    )


def test_first_rank_traceback_once_and_why_the_others_stopped() -> None:
    lines = four_ranks()._render_traceback_()
    # Rank 2 raised the very same error: one traceback, under both ranks.
    assert lines[0] == "--- ranks 1,2 raised ValueError ---"
    # Outside a notebook cell there is no notebook number: none, not the engine's.
    assert lines[1:4] == TB.replace("Cell In[1]", "This cell").rstrip("\n").splitlines()
    assert lines[4:] == [
        "[rank 0] released after ranks 1,2 raised ValueError (here: RuntimeError: Connection"
        " closed by peer [127.0.0.1]:1234)",
        "[rank 3] also raised ValueError: other batch",
    ]
    assert not any("Engine Exception" in line or ":execute]" in line for line in lines)


def test_unfolded_a_line_for_every_other_rank() -> None:
    error = four_ranks()
    lines = render(error.failures, error.ranks, fold=False)  # %%dist --no-fold
    assert lines[0] == "--- rank 1 raised ValueError ---"
    assert lines[4:] == [
        "[rank 0] released after rank 1 raised ValueError (here: RuntimeError: Connection"
        " closed by peer [127.0.0.1]:1234)",
        "[rank 2] raised the same ValueError",
        "[rank 3] also raised ValueError: other batch",
    ]


def test_64_ranks_the_same_error_one_traceback() -> None:
    error = RankError([failure(r, "ValueError", "bad batch", TB) for r in range(64)], [*range(64)])
    lines = error._render_traceback_()
    assert lines[0] == "--- ranks 0-63 raised ValueError ---"
    assert len(lines) == 4  # the header and the traceback, nothing per rank


def test_64_ranks_different_errors_each_once_with_their_ranks() -> None:
    failures = [failure(5, "ValueError", "bad batch", TB)]
    failures += [failure(r, "ValueError", f"batch {r % 2}", TB) for r in range(6, 10)]
    failures += [
        failure(r, "RuntimeError", f"Connection closed by peer [10.0.0.{r}]:1234")
        for r in range(64)
        if not 5 <= r < 10
    ]
    lines = RankError(failures, [*range(64)])._render_traceback_()
    assert lines[0] == "--- rank 5 raised ValueError ---"
    assert lines[4:] == [
        # The released ranks' values differ (a peer's address): one line, one example.
        "[ranks 0-4,10-63] released after rank 5 raised ValueError (rank 0: RuntimeError:"
        " Connection closed by peer [10.0.0.0]:1234)",
        "[ranks 6,8] also raised ValueError: batch 0",
        "[ranks 7,9] also raised ValueError: batch 1",
    ]


def test_a_dead_rank_names_itself_and_frees_the_others() -> None:
    died = "rank 0 (pid 7, host vm) died: signal SIGKILL; run %dist_cluster restart to replace it"
    error = RankError([failure(0, "RankDied", died), failure(1, "RuntimeError", "reset")], [0, 1])
    assert error._render_traceback_() == [
        f"[rank 0] {died}",
        "[rank 1] released after rank 0 died (here: RuntimeError: reset)",
    ]


# --- cell numbers: the notebook's, never the engine's own count --------------------------

ENGINE_TB = (
    "ZeroDivisionError                         Traceback (most recent call last)\n"
    "Cell In[2], line 2\n"
    "      1 y = 2\n"
    "----> 2 divide(0)\n"
    "\n"
    "Cell In[1], line 2, in divide(a)\n"
    "      1 def divide(a):\n"
    "----> 2     return 1 / a\n"
    "\n"
    "File /usr/lib/python3/site.py:10, in helper()\n"
    "ZeroDivisionError: division by zero\n"
)


def test_the_failed_cell_gets_the_notebook_number_earlier_cells_none() -> None:
    text = renumber(ENGINE_TB, 10)
    assert "Cell In[10], line 2\n" in text
    assert "An earlier cell, line 2, in divide(a)" in text
    assert "In[1]" not in text and "In[2]" not in text
    assert "File /usr/lib/python3/site.py:10, in helper()" in text


def test_no_number_without_a_notebook_cell() -> None:
    text = renumber(ENGINE_TB, None)
    assert "This cell, line 2\n" in text and "In[" not in text


def test_coloured_cell_names_are_renumbered() -> None:
    coloured = "\x1b[0;32mCell\x1b[0m \x1b[0;32mIn[3]\x1b[0;32m, line 1\x1b[0m\n"
    assert (
        renumber(coloured, 7) == "\x1b[0;32mCell\x1b[0m \x1b[0;32mIn[7]\x1b[0;32m, line 1\x1b[0m\n"
    )


def test_rendered_traceback_outside_a_cell_has_no_engine_number() -> None:
    error = RankError([failure(0, "ZeroDivisionError", "division by zero", ENGINE_TB)], [0, 1])
    lines = error._render_traceback_()
    assert not any("In[2]" in line or "In[1]" in line for line in lines), lines


def test_the_cell_number_comes_from_the_running_cell(shell: object) -> None:
    # In the shell's own cell: IPython 9 has already advanced execution_count past it.
    result = shell.run_cell(  # type: ignore[attr-defined]
        "from dist_notebook.cluster.onranks.tracebacks import notebook_cell\n"
        "seen = notebook_cell()",
        store_history=True,
    )
    assert shell.user_ns["seen"] == result.execution_count  # type: ignore[attr-defined]
