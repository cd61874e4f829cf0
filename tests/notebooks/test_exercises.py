"""The exercise mechanism itself: parsing solution files, pairing cells, and a real kernel
proving that a check which cannot tell right from wrong fails the test.

The notebooks here are tiny and need no cluster, so a kernel starts in about a second.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.exercises import ExerciseError, find_exercises, parse_solutions
from testbed.notebook_runner import ExerciseRunner, NotebookFailure

SOLUTIONS = """\
# Solutions of a test notebook.

# %% half
def half(n):
    return n / 2

# %% half wrong: integer division passes on even numbers
def half(n):
    return n // 2
"""

RIGHT = """
# %% half right: multiplying by a half is the same number
def half(n):
    return n * 0.5
"""
STRICT_CHECK = (  # accepts only the division it has in mind: rejects a right answer
    "import inspect\n"
    "try:\n"
    "    got = half(7)\n"
    "except NotImplementedError:\n"
    "    raise AssertionError('fill in half()') from None\n"
    "assert got == 3.5, got\n"
    "assert '/ 2' in inspect.getsource(half), 'divide by 2'"
)

STUB = "def half(n):\n    raise NotImplementedError"
GOOD_CHECK = (
    "assert callable(half)\n"
    "try:\n"
    "    got = half(7)\n"
    "except NotImplementedError:\n"
    "    raise AssertionError('fill in half() in the exercise cell') from None\n"
    "assert got == 3.5, f'half(7) should be 3.5, got {got}: use /, not //'\n"
    "print('Correct')"
)
WEAK_CHECK = (  # an even number only: the wrong answer passes it
    "try:\n"
    "    got = half(8)\n"
    "except NotImplementedError:\n"
    "    raise AssertionError('fill in half()') from None\n"
    "assert got == 4, got"
)


def _cell(source: str, tag: str | None = None) -> dict:
    meta = {"tags": [tag]} if tag else {}
    return {"cell_type": "code", "source": source, "metadata": meta, "outputs": []}


def _notebook(tmp_path: Path, check: str, solutions: str = SOLUTIONS) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("before = 1"),
        nbformat.v4.new_code_cell(STUB, metadata={"tags": ["exercise:half"]}),
        nbformat.v4.new_code_cell(check, metadata={"tags": ["check:half"]}),
        nbformat.v4.new_code_cell("assert half(3) == 1.5 and before == 1"),
    ]
    path = tmp_path / "nb" / "tiny.ipynb"
    (path.parent / "solutions").mkdir(parents=True)
    nbformat.write(nb, path)
    (path.parent / "solutions" / "tiny.py").write_text(solutions)
    return path


def _run(tmp_path: Path, check: str, solutions: str = SOLUTIONS) -> ExerciseRunner:
    runner = ExerciseRunner(_notebook(tmp_path, check, solutions), tmp_path / "k", dict(os.environ))
    runner.run()
    return runner


def test_parse_solutions_sections() -> None:
    answers = parse_solutions(SOLUTIONS)
    assert list(answers) == ["half"]
    assert answers["half"].solution is not None and "n / 2" in answers["half"].solution
    assert [why for why, _ in answers["half"].wrong] == ["integer division passes on even numbers"]
    assert answers["half"].right == []
    other = parse_solutions(SOLUTIONS + RIGHT)["half"]
    assert [why for why, _ in other.right] == ["multiplying by a half is the same number"]
    assert len(other.wrong) == 1 and other.solution is not None and "n / 2" in other.solution


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x = 1\n# %% a\ny\n", "code before the first"),
        ("# %% a b c\ny\n", "is not '# %% <id>'"),
        ("# %% a\n\n# %% a wrong: w\nz\n", "section 'a' is empty"),
        ("# %% a\ny\n# %% a\nz\n", "two solutions"),
    ],
)
def test_parse_solutions_errors_name_the_fix(text: str, message: str) -> None:
    with pytest.raises(ExerciseError, match=message):
        parse_solutions(text)


@pytest.mark.parametrize(
    ("cells", "solutions", "message"),
    [
        ([_cell(STUB, "exercise:half")], SOLUTIONS, "no cell tagged check:half"),
        ([_cell("x", "check:half")], SOLUTIONS, "no cell tagged exercise:half"),
        (
            [_cell("def half(n):\n    return n / 2", "exercise:half"), _cell("x", "check:half")],
            SOLUTIONS,
            "must be a stub",
        ),
        (
            [_cell(STUB, "exercise:half"), _cell("x", "check:half")],
            "# %% half\nx\n",
            "no '# %% half wrong: <why>' section",
        ),
        (
            [_cell("x", "check:half"), _cell(STUB, "exercise:half")],
            SOLUTIONS,
            "must come after the exercise cell",
        ),
    ],
)
def test_pairing_errors_name_the_fix(cells: list, solutions: str, message: str) -> None:
    with pytest.raises(ExerciseError, match=message):
        find_exercises(cells, parse_solutions(solutions))


@pytest.mark.timeout(120)
def test_runner_proves_stub_wrong_and_solution(tmp_path: Path) -> None:
    runner = _run(tmp_path, GOOD_CHECK)
    assert runner.report.exercises == ["half"]
    assert runner.report.wrong_rejected == 1
    # The notebook went on after the exercise with the solution in place (last cell).
    last = runner.nb.cells[-1]
    assert not any(o.get("output_type") == "error" for o in last.outputs)


@pytest.mark.timeout(120)
def test_runner_proves_other_right_answers_pass(tmp_path: Path) -> None:
    runner = _run(tmp_path, GOOD_CHECK, SOLUTIONS + RIGHT)
    assert runner.report.right_accepted == 1 and runner.report.wrong_rejected == 1


@pytest.mark.timeout(120)
def test_runner_fails_a_check_that_rejects_a_right_answer(tmp_path: Path) -> None:
    # The check passes the solution and rejects the wrong answer, but not every right answer.
    with pytest.raises(
        NotebookFailure, match=r"the check on the right answer \(multiplying by a half.*failed"
    ):
        _run(tmp_path, STRICT_CHECK, SOLUTIONS + RIGHT)


@pytest.mark.timeout(120)
def test_runner_fails_a_check_that_passes_a_wrong_answer(tmp_path: Path) -> None:
    with pytest.raises(NotebookFailure, match=r"check passed on the wrong answer \(integer"):
        _run(tmp_path, WEAK_CHECK)


@pytest.mark.timeout(120)
def test_runner_keeps_displays_updated_in_place(tmp_path: Path) -> None:
    # A check that shows a line and updates it in place (as the cluster's progress line does
    # when a rank's error re-makes the process group), run for the stub, the wrong answer
    # and the solution: nbclient applies the update to the notebook's cell at that index.
    updating = "h = display('working', display_id=True)\nh.update('done')\n" + GOOD_CHECK
    runner = _run(tmp_path, updating)
    assert runner.report.wrong_rejected == 1
    check = runner.nb.cells[2]
    assert [o.get("data", {}).get("text/plain") for o in check.outputs][0] == "'done'"


@pytest.mark.timeout(120)
def test_runner_requires_an_assertion_error(tmp_path: Path) -> None:
    # Without catching NotImplementedError the check fails for the wrong reason.
    with pytest.raises(NotebookFailure, match="raised NotImplementedError.*not an AssertionError"):
        _run(tmp_path, "assert half(7) == 3.5")


@pytest.mark.timeout(120)
def test_runner_fails_when_the_solution_does_not_pass(tmp_path: Path) -> None:
    broken = SOLUTIONS.replace("return n / 2", "return n / 3")
    with pytest.raises(NotebookFailure, match="the check on the solution failed"):
        _run(tmp_path, GOOD_CHECK, broken)
