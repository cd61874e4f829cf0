"""Entry points that moved keep their old paths: each old path gives the same objects.

The processes' entry points moved into
``dist_notebook/boot/``; command lines written before (a Slurm batch file, a user's
launcher config, a cluster file) run them by the old paths.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

# old path -> new path of each process's entry point
ENTRY_POINTS = {
    "dist_notebook.engine.boot": "dist_notebook.boot.engine",
    "dist_notebook.cluster.controller_boot": "dist_notebook.boot.controller",
    "dist_notebook.engine.forkserver": "dist_notebook.boot.forkserver",
}
START_S = 120  # an entry point's start (ipyparallel's app, or torch for the fork server)


def _public_definitions(module: object) -> set[str]:
    """Names a module defines at its top level (def, class, assignment), but private ones."""
    tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


@pytest.mark.parametrize("old_path", sorted(ENTRY_POINTS))
def test_an_old_entry_point_gives_the_moved_modules_objects(old_path: str) -> None:
    old = importlib.import_module(old_path)
    new = importlib.import_module(ENTRY_POINTS[old_path])
    assert old.main is new.main
    missing = _public_definitions(new) - set(old.__all__)
    assert not missing, f"{old_path} does not re-export {sorted(missing)}"
    for attribute in old.__all__:
        assert getattr(old, attribute) is getattr(new, attribute), attribute
    assert _public_definitions(old) == set()


def test_the_launchers_command_lines_name_the_new_entry_points() -> None:
    from dist_notebook.cluster import forkserver, launchers

    assert launchers.ENGINE_CMD[1:] == ["-m", "dist_notebook.boot.engine"]
    assert launchers.CONTROLLER_CMD[1:] == ["-m", "dist_notebook.boot.controller"]
    assert forkserver.SERVER_CMD[-2:] == ["-m", "dist_notebook.boot.forkserver"]


@pytest.mark.parametrize(
    ("module", "says"),
    [
        ("dist_notebook.engine.boot", "Start an IPython engine"),
        ("dist_notebook.cluster.controller_boot", "Start the IPython controller"),
    ],
)
def test_python_m_runs_an_entry_point_by_its_old_path(module: str, says: str) -> None:
    """``python -m <old path> --help``: our main ran as far as ipyparallel's app, which
    printed its help and ended cleanly (the new paths start every test's cluster)."""
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        timeout=START_S,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert says in done.stdout, done.stdout[:2000] + done.stderr


def test_python_m_starts_the_fork_server_by_its_old_path() -> None:
    """The server imports what engines import, says it is ready, and ends at EOF on its
    stdin (the kernel closed it)."""
    done = subprocess.run(
        [sys.executable, "-u", "-m", "dist_notebook.engine.forkserver"],
        capture_output=True,
        text=True,
        timeout=START_S,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == {"ready": True}, done.stdout + done.stderr
