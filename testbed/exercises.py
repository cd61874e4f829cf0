"""The exercise mechanism of the teaching notebooks: tags, solution files, validation.

In a notebook, an exercise is two code cells:

- a cell tagged ``exercise:<id>`` holds the stub the learner fills in: it must contain
  ``...`` or ``raise NotImplementedError``;
- a later cell tagged ``check:<id>`` checks the answer and raises ``AssertionError`` with
  a message that helps (what was expected, what came back, what to look at) when it is
  wrong. A check should also try a small case of its own on purpose (an odd world size,
  an uneven row count) where the notebook's own case cannot tell a wrong answer apart.

The answers live outside the notebook, in ``notebooks/solutions/<notebook stem>.py``, in
sections that each hold the whole cell that replaces the stub (magics included)::

    # %% <id>
    <the solution>

    # %% <id> wrong: <why a learner might write this>
    <a plausible wrong answer>

    # %% <id> right: <another way a learner may get it right>
    <another right answer>

Every exercise has one solution and at least one wrong answer; where more than one answer
is right (any scale inside a window, a collective of another form), the other right answers
are listed too, so that a check that rejects one of them fails the test. The test
(``runner.py``) runs each notebook once, top to bottom in one kernel; at each exercise
it runs the stub then the check (which must fail), each wrong answer then the check
(which must fail), each other right answer then the check (which must pass), then the
solution then the check (which must pass), and goes on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECTION = re.compile(
    r"^# %% (?P<id>[A-Za-z0-9_.-]+)(?:\s+(?P<kind>wrong|right):\s*(?P<why>.*\S))?\s*$"
)
STUB_MARKERS = ("...", "raise NotImplementedError")
EXERCISE_TAG = "exercise:"
CHECK_TAG = "check:"


@dataclass
class Answers:
    """The solution and the wrong answers of one exercise."""

    id: str
    solution: str | None = None
    wrong: list[tuple[str, str]] = field(default_factory=list)  # (why, source)
    right: list[tuple[str, str]] = field(default_factory=list)  # other right answers


@dataclass
class Exercise:
    """Where one exercise sits in a notebook (cell indices) and its answers."""

    id: str
    exercise_index: int
    check_index: int
    answers: Answers


class ExerciseError(ValueError):
    """A notebook and its solution file do not fit together."""


def solutions_path(notebook: Path) -> Path:
    return notebook.parent / "solutions" / f"{notebook.stem}.py"


def parse_solutions(text: str, where: str = "solutions") -> dict[str, Answers]:
    """Sections ``# %% <id>``, ``# %% <id> wrong: <why>`` and ``# %% <id> right: <why>``."""
    answers: dict[str, Answers] = {}
    current: tuple[str, str | None, str | None] | None = None
    lines: list[str] = []

    def close() -> None:
        if current is None:
            return
        ex_id, kind, why = current
        source = "\n".join(lines).strip("\n")
        if not source.strip():
            raise ExerciseError(f"{where}: section {ex_id!r} is empty")
        entry = answers.setdefault(ex_id, Answers(ex_id))
        if why is None:
            if entry.solution is not None:
                raise ExerciseError(f"{where}: two solutions for {ex_id!r}")
            entry.solution = source
        elif kind == "right":
            entry.right.append((why, source))
        else:
            entry.wrong.append((why, source))

    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("# %%"):
            match = SECTION.match(line)
            if match is None:
                raise ExerciseError(
                    f"{where}:{number}: {line!r} is not '# %% <id>', '# %% <id> wrong: <why>' "
                    "or '# %% <id> right: <why>'"
                )
            close()
            current, lines = (match["id"], match["kind"], match["why"]), []
        elif current is not None:
            lines.append(line)
        elif line.strip() and not line.startswith("#"):
            raise ExerciseError(f"{where}:{number}: code before the first '# %% <id>' section")
    close()
    return answers


def tagged(cell: Any, prefix: str) -> str | None:
    """The id of the first tag of *cell* that starts with *prefix*, else None."""
    for tag in cell.get("metadata", {}).get("tags", []):
        if tag.startswith(prefix):
            return tag[len(prefix) :]
    return None


def find_exercises(cells: list[Any], answers: dict[str, Answers]) -> list[Exercise]:
    """Pair every ``exercise:<id>`` cell with its later ``check:<id>`` cell and answers.

    Raises ExerciseError naming the fix when a notebook and its solutions disagree.
    """
    stubs: dict[str, int] = {}
    checks: dict[str, int] = {}
    for index, cell in enumerate(cells):
        for prefix, seen in ((EXERCISE_TAG, stubs), (CHECK_TAG, checks)):
            ex_id = tagged(cell, prefix)
            if ex_id is None:
                continue
            if cell.get("cell_type") != "code":
                raise ExerciseError(f"cell {index} is tagged {prefix}{ex_id} but is not code")
            if ex_id in seen:
                raise ExerciseError(f"two cells are tagged {prefix}{ex_id}")
            seen[ex_id] = index
    problems = []
    for ex_id in sorted(set(stubs) | set(checks) | set(answers)):
        if ex_id not in stubs:
            problems.append(f"{ex_id!r}: no cell tagged exercise:{ex_id}")
            continue
        if ex_id not in checks:
            problems.append(f"{ex_id!r}: no cell tagged check:{ex_id}")
        elif checks[ex_id] <= stubs[ex_id]:
            problems.append(f"{ex_id!r}: the check cell must come after the exercise cell")
        stub = _source(cells[stubs[ex_id]])
        if not any(marker in stub for marker in STUB_MARKERS):
            problems.append(
                f"{ex_id!r}: the exercise cell must be a stub ('...' or "
                "'raise NotImplementedError'); put the answer in the solutions file"
            )
        entry = answers.get(ex_id)
        if entry is None or entry.solution is None:
            problems.append(f"{ex_id!r}: no '# %% {ex_id}' solution section")
        elif not entry.wrong:
            problems.append(f"{ex_id!r}: no '# %% {ex_id} wrong: <why>' section")
        elif entry.solution.strip() == stub.strip():
            problems.append(f"{ex_id!r}: the notebook ships the solution as the stub")
    if problems:
        raise ExerciseError("; ".join(problems))
    return sorted(
        (Exercise(i, stubs[i], checks[i], answers[i]) for i in stubs),
        key=lambda e: e.exercise_index,
    )


def _source(cell: Any) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def load_exercises(notebook: Path, cells: list[Any]) -> list[Exercise]:
    """The exercises of *notebook* with the answers from its solutions file."""
    path = solutions_path(notebook)
    has_tags = any(tagged(c, EXERCISE_TAG) or tagged(c, CHECK_TAG) for c in cells)
    if not path.exists():
        if has_tags:
            raise ExerciseError(f"{notebook.name} has exercises but no solutions/{path.name}")
        return []
    answers = parse_solutions(path.read_text(encoding="utf-8"), where=f"solutions/{path.name}")
    return find_exercises(cells, answers)
