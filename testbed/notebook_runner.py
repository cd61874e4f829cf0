"""Run a teaching notebook once, top to bottom in one kernel, proving its exercises.

At each exercise (see ``exercises.py``) the runner executes, in the notebook's kernel:

1. the stub, then the check: the check must fail with AssertionError;
2. each wrong answer, then the check: the check must fail with AssertionError;
3. each other right answer, then the check: both must pass;
4. the solution, then the check: both must pass;

and then goes on with the cell after the check. Stubs and wrong answers may raise in
their own cell (a stub that raises NotImplementedError does); only the check's outcome
counts, and it must be an AssertionError (a NameError would mean the check never looked
at the answer).

The kernel is this interpreter (``sys.executable``) through a kernel spec written for
the run, so the notebook sees the same environment as the tests.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .exercises import Exercise, load_exercises

KERNEL_NAME = "dist-notebook-test"
CELL_TIMEOUT = 300  # seconds, per cell


class NotebookFailure(AssertionError):
    """A cell failed, or an exercise's check did not tell right from wrong."""


@dataclass
class RunReport:
    """What one run of a notebook did, and how long the learner's path took."""

    exercises: list[str] = field(default_factory=list)
    wrong_rejected: int = 0
    right_accepted: int = 0
    total_s: float = 0.0
    extra_s: float = 0.0  # running stubs and wrong answers, which a learner does not do
    cell_s: dict[int, float] = field(default_factory=dict)  # the learner's path, per cell

    def slowest(self, n: int = 3) -> str:
        top = sorted(self.cell_s.items(), key=lambda kv: -kv[1])[:n]
        return ", ".join(f"cell {i} {s:.1f} s" for i, s in top)

    @property
    def learner_s(self) -> float:
        return self.total_s - self.extra_s


def kernel_manager(spec_dir: Path) -> Any:
    """A kernel manager that starts this interpreter's ipykernel, whatever else is installed."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    kernel_dir = spec_dir / KERNEL_NAME
    kernel_dir.mkdir(parents=True, exist_ok=True)
    (kernel_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "dist-notebook tests",
                "language": "python",
            }
        )
    )
    specs = KernelSpecManager(kernel_dirs=[str(spec_dir)], ensure_native_kernel=False)
    return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)


def _error_of(cell: Any) -> tuple[str, str] | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return output.get("ename", ""), output.get("evalue", "")
    return None


def _text_of(cell: Any) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif output.get("output_type") == "error":
            parts.append(f"{output.get('ename')}: {output.get('evalue')}")
    return "".join(parts)[-2000:]


class ExerciseRunner:
    """Executes one notebook with nbclient, cell by cell, exercises included."""

    def __init__(self, path: Path, spec_dir: Path, env: dict[str, str]) -> None:
        import nbclient
        import nbformat

        self.path = path
        self.nb = nbformat.read(path, as_version=4)
        self.exercises = {e.exercise_index: e for e in load_exercises(path, self.nb.cells)}
        # nbclient puts every executed cell back into the notebook at its index: keep the
        # committed sources apart so that a scratch run never replaces a check or a stub.
        self.sources = [cell.source for cell in self.nb.cells]
        self.checks = {e.check_index for e in self.exercises.values()}
        self.km = kernel_manager(spec_dir)
        self.env = env
        self.client = nbclient.NotebookClient(
            self.nb,
            km=self.km,
            timeout=CELL_TIMEOUT,
            allow_errors=False,
            resources={"metadata": {"path": str(path.parent)}},
        )
        self.report = RunReport()

    def run(self) -> RunReport:
        started = time.perf_counter()
        try:
            with self.client.setup_kernel(env=self.env):
                for index, cell in enumerate(self.nb.cells):
                    if index in self.exercises:
                        self._exercise(self.exercises[index])
                    elif index not in self.checks and cell.cell_type == "code":
                        self._run(cell, index, f"cell {index}")
        finally:
            self.report.total_s = time.perf_counter() - started
            # nbclient shuts down only kernels whose manager it made itself: this one is
            # ours, and a kernel left running would hold its cluster's processes too.
            if self.km.has_kernel:
                self.km.shutdown_kernel(now=False)
        return self.report

    def _run(self, cell: Any, index: int, what: str) -> None:
        from nbclient.exceptions import CellExecutionError

        started = time.perf_counter()
        try:
            self._execute(cell, index)
        except CellExecutionError as e:
            raise NotebookFailure(f"{self.path.name}: {what} failed: {e.ename}: {e.evalue}") from e
        finally:
            took = time.perf_counter() - started
            self.report.cell_s[index] = self.report.cell_s.get(index, 0.0) + took

    def _scratch(self, source: str, index: int) -> Any:
        """Execute *source* as a cell at *index* that may fail; return the executed cell."""
        import nbformat

        cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["raises-exception"]})
        self._execute(cell, index)
        return cell

    def _execute(self, cell: Any, index: int) -> None:
        """Execute *cell* as the notebook's cell *index*.

        nbclient applies a display's update to ``nb.cells[index]``, not to the cell being
        executed: a stub, an answer or a check run in place of the committed cell must be
        that cell while it runs (a progress line updated in place raised IndexError), and
        the displays of an earlier run at the same index no longer point into it."""
        self.nb.cells[index] = cell
        self.client.clear_display_id_mapping(index)
        self.client.execute_cell(cell, index)

    def _check_fails(self, ex: Exercise, answer: str, what: str) -> None:
        started = time.perf_counter()
        self._scratch(answer, ex.exercise_index)
        check = self._scratch(self.sources[ex.check_index], ex.check_index)
        self.report.extra_s += time.perf_counter() - started
        error = _error_of(check)
        if error is None:
            raise NotebookFailure(
                f"{self.path.name}: exercise {ex.id!r}: the check passed on {what}; "
                "make the check cell reject it"
            )
        if error[0] != "AssertionError":
            raise NotebookFailure(
                f"{self.path.name}: exercise {ex.id!r}: on {what} the check raised "
                f"{error[0]}: {error[1]}, not an AssertionError with a helpful message"
            )

    def _exercise(self, ex: Exercise) -> None:
        self._check_fails(ex, self.sources[ex.exercise_index], "the stub")
        for why, source in ex.answers.wrong:
            self._check_fails(ex, source, f"the wrong answer ({why})")
            self.report.wrong_rejected += 1
        import nbformat

        for why, source in ex.answers.right:
            started = time.perf_counter()
            what = f"exercise {ex.id!r}: the right answer ({why})"
            self._run(nbformat.v4.new_code_cell(source), ex.exercise_index, what)
            check = nbformat.v4.new_code_cell(self.sources[ex.check_index])
            what = f"exercise {ex.id!r}: the check on the right answer ({why})"
            self._run(check, ex.check_index, what)
            self.report.right_accepted += 1
            self.report.extra_s += time.perf_counter() - started

        assert ex.answers.solution is not None
        solution = nbformat.v4.new_code_cell(ex.answers.solution)
        self._run(solution, ex.exercise_index, f"exercise {ex.id!r}: the solution")
        check = nbformat.v4.new_code_cell(self.sources[ex.check_index])
        self._run(check, ex.check_index, f"exercise {ex.id!r}: the check on the solution")
        self.report.exercises.append(ex.id)
