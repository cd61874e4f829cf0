"""The teaching notebooks: each runs top to bottom on a fresh kernel, its exercises prove
that stubs and wrong answers fail their checks and the solutions pass, and none is
committed with outputs.

Every notebook starts its own cluster (``%dist_cluster start``: one rank per GPU, else 2 CPU
ranks) and stops it at the end. Run with ``pytest -m notebooks tests/notebooks -s`` to see
each notebook's wall time (the learner's path, and the whole test with the wrong answers).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from dist_notebook.cluster.devices import visible_gpus
from testbed.exercises import ExerciseError, load_exercises
from testbed.notebook_runner import ExerciseRunner

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
# The target is 120 s per notebook on 2 CPU ranks of a 2-core machine (notebooks/README.md
# has the measured times); the bound is twice that so a busy CI machine does not flake.
LEARNER_PATH_BOUND_S = 240
EXECUTED_DIR_ENV = "DIST_NOTEBOOK_EXECUTED_DIR"  # set it to keep the executed notebooks
# Run a second time beside two CPU hogs (tests/conftest.py's cpu_hogs): their checks read times.
BESIDE_HOGS = [
    "03_train_ddp_live.ipynb",
    "04_communication_overhead.ipynb",
    "09_profiling_and_hangs.ipynb",
    "12_find_a_training_configuration.ipynb",
    "14_collective_algorithms.ipynb",
]

pytestmark = pytest.mark.notebooks


def test_notebooks_found() -> None:
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOKS_DIR}"
    missing = [name for name in BESIDE_HOGS if NOTEBOOKS_DIR / name not in NOTEBOOKS]
    assert not missing, f"BESIDE_HOGS names notebooks that are not in {NOTEBOOKS_DIR}: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_exercises_fit_their_solutions(path: Path) -> None:
    """Tags, stubs and the solutions file agree (checked without a kernel)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    try:
        load_exercises(path, nb["cells"])
    except ExerciseError as e:
        pytest.fail(f"{path.name}: {e}")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    _run_notebook(path, tmp_path)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", BESIDE_HOGS)
def test_notebook_runs_beside_two_cpu_hogs(name: str, tmp_path: Path, cpu_hogs: Any) -> None:
    """A class shares one server: the notebooks whose checks read timings (the straggler,
    the overlap, the configurations' step times) run again beside two busy processes."""
    _run_notebook(NOTEBOOKS_DIR / name, tmp_path)


def _run_notebook(path: Path, tmp_path: Path) -> None:
    env = dict(os.environ)
    env["DIST_NOTEBOOK_STORE"] = str(tmp_path / "runs.sqlite")
    env.pop("MPLBACKEND", None)  # let the inline backend of ipykernel draw the plots
    if len(visible_gpus()) == 1:
        # One GPU would give a 1-rank cluster, where an average or a partition cannot tell a
        # wrong answer from a right one: prove the exercises on 2 CPU ranks instead.
        env["CUDA_VISIBLE_DEVICES"] = ""
    runner = ExerciseRunner(path, tmp_path / "kernels", env)
    try:
        report = runner.run()
    finally:
        keep = os.environ.get(EXECUTED_DIR_ENV)
        if keep:  # the executed notebook, outputs included, to read what it printed
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / path.name).write_text(json.dumps(runner.nb), encoding="utf-8")
        r = runner.report
        print(
            f"\n{path.name}: learner's path {r.learner_s:.1f} s, with stubs and wrong answers "
            f"{r.total_s:.1f} s; exercises {r.exercises}, "
            f"wrong answers rejected {r.wrong_rejected}, other right answers accepted "
            f"{r.right_accepted}; slowest: {r.slowest()}"
        )
    assert report.exercises == [e.id for e in runner.exercises.values()]
    assert report.learner_s < LEARNER_PATH_BOUND_S, report


def _outputs_of(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    problems = []
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"cell {index} has outputs")
        if cell.get("execution_count") is not None:
            problems.append(f"cell {index} has an execution count")
    if "widgets" in nb.get("metadata", {}):
        problems.append("notebook metadata keeps widget state")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_committed_without_outputs(path: Path) -> None:
    problems = _outputs_of(path)
    assert not problems, (
        f"{path.name}: {'; '.join(problems)}; run python tools/strip_notebooks.py before committing"
    )
