"""The teaching notebooks: each runs top to bottom on a fresh kernel, and none is committed
with outputs.

Every notebook starts its own cluster (``%dist_cluster start``: one rank per GPU, else 2 CPU
ranks) and stops it at the end. The kernel is this interpreter (``sys.executable``) through a
kernel spec written for the test, so the notebooks see the same environment as the tests.
Run with ``pytest -m notebooks tests/notebooks -s`` to see each notebook's wall time.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
CELL_TIMEOUT = 300  # seconds, per cell
KERNEL_NAME = "dist-notebook-test"

pytestmark = pytest.mark.notebooks


def _kernel_manager(spec_dir: Path) -> Any:
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


def test_notebooks_found() -> None:
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOKS_DIR}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")

    nb = nbformat.read(path, as_version=4)
    km = _kernel_manager(tmp_path / "kernels")
    env = dict(os.environ)
    env["DIST_NOTEBOOK_STORE"] = str(tmp_path / "runs.sqlite")
    env.pop("MPLBACKEND", None)  # let the inline backend of ipykernel draw the plots
    client = nbclient.NotebookClient(
        nb,
        km=km,
        timeout=CELL_TIMEOUT,
        allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
    )
    started = time.perf_counter()
    try:
        client.execute(env=env)
    finally:
        took = time.perf_counter() - started
        print(f"\n{path.name}: {took:.1f} s")
    # The kernel really was this interpreter.
    assert km.kernel_spec is not None and km.kernel_spec.argv[0] == sys.executable


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
