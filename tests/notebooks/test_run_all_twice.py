"""A second "Run All" of a teaching notebook in the same kernel, as a learner does it.

The learner runs the notebook part of the way (its cluster is up, the last cell, which
stops it, not reached yet), then "Run All" from the top. The first cell's
``%dist_cluster start`` finds the ready cluster with the same spec and reuses it with a
one-line note; every later cell runs again on it, and the notebook ends as the first run
would. Exercise stubs are replaced by their solutions: this is the learner's path, not
the exercise proof of ``test_notebooks.py``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from dist_notebook.cluster.devices import visible_gpus
from testbed.exercises import load_exercises
from testbed.notebook_runner import CELL_TIMEOUT, kernel_manager

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "01_data_parallel_basics.ipynb"

pytestmark = [pytest.mark.notebooks, pytest.mark.timeout(600)]


def _learner_cells(nb: Any) -> list[Any]:
    """The notebook's code cells, each exercise stub replaced by its solution."""
    import nbformat

    solutions = {e.exercise_index: e.answers.solution for e in load_exercises(NOTEBOOK, nb.cells)}
    cells = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        source = solutions.get(index) or cell.source
        cells.append(nbformat.v4.new_code_cell(source))
    return cells


def _text(cell: Any) -> str:
    return "".join(
        o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"
    )


def test_run_all_again_with_the_cluster_up_reuses_it(tmp_path: Path) -> None:
    import nbclient
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = _learner_cells(nb)
    stops = [i for i, c in enumerate(cells) if "%dist_cluster stop" in c.source]
    assert stops, f"{NOTEBOOK.name} no longer stops its cluster: update this test"
    first_pass = cells[: stops[-1]]
    second_pass = [nbformat.v4.new_code_cell(c.source) for c in cells]

    env = dict(os.environ)
    env["DIST_NOTEBOOK_STORE"] = str(tmp_path / "runs.sqlite")
    env.pop("MPLBACKEND", None)
    if len(visible_gpus()) == 1:
        env["CUDA_VISIBLE_DEVICES"] = ""  # as test_notebooks: 2 CPU ranks, not 1 GPU rank
    km = kernel_manager(tmp_path / "kernels")
    run = nbformat.v4.new_notebook(cells=first_pass + second_pass)
    client = nbclient.NotebookClient(
        run, km=km, timeout=CELL_TIMEOUT, allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )  # fmt: skip
    try:
        with client.setup_kernel(env=env):
            for index, cell in enumerate(run.cells):
                client.execute_cell(cell, index)
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=False)

    start_cells = [
        i for i, c in enumerate(second_pass) if re.search(r"^%dist_cluster start", c.source, re.M)
    ]
    assert start_cells, f"{NOTEBOOK.name} has no %dist_cluster start cell"
    reused = _text(second_pass[start_cells[0]])
    assert "is already ready with this spec: reusing it" in reused, reused
    # Nothing failed on the second pass (allow_errors=False), and it ended the cluster.
    stop = second_pass[stops[-1]]
    assert re.search(r"cluster \S+ stopped", _text(stop)), _text(stop)
