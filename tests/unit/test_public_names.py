"""What users catch or call is importable from ``dist_notebook`` itself, and stays lazy.

Notebooks catch ``RankError`` (and ``CollectiveMismatch``) around cells that fail on
purpose; they import them from the package, not from the module that defines them, so a
module's move inside the package (``cluster/onranks/``) never reaches user code.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import dist_notebook

# public name -> the module that defines it
DEFINED_IN = {
    "RankError": "dist_notebook.cluster.onranks.execute",
    "CollectiveMismatch": "dist_notebook.cluster.onranks.mismatch",
    "ClusterSpec": "dist_notebook.cluster.spec",
    "DistCluster": "dist_notebook.cluster.cluster",
    "report": "dist_notebook.engine",
    "load_run": "dist_notebook.training",
}
START_S = 60  # a fresh interpreter importing the package (no torch, no ipyparallel)


@pytest.mark.parametrize("name", sorted(DEFINED_IN))
def test_a_public_name_is_the_defining_modules_object(name: str) -> None:
    assert name in dist_notebook.__all__
    defining = importlib.import_module(DEFINED_IN[name])
    assert getattr(dist_notebook, name) is getattr(defining, name)


def test_collective_mismatch_is_caught_as_a_rank_error() -> None:
    assert issubclass(dist_notebook.CollectiveMismatch, dist_notebook.RankError)


def test_every_name_in_all_is_there() -> None:
    for name in dist_notebook.__all__:
        assert getattr(dist_notebook, name) is not None, name


def test_an_unknown_name_says_so() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'RankErrors'"):
        _ = dist_notebook.RankErrors  # type: ignore[attr-defined]


def test_import_dist_notebook_loads_nothing_behind_the_public_names() -> None:
    """``%load_ext`` starts the fork server before anything heavy is imported: the
    package's import loads only itself until a public name is used."""
    probe = (
        "import sys, json, dist_notebook\n"
        "before = sorted(m for m in sys.modules if m.startswith(('dist_notebook', "
        "'ipyparallel', 'torch')))\n"
        "dist_notebook.RankError\n"
        "after = 'ipyparallel' in sys.modules\n"
        "print(json.dumps([before, after]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=START_S,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout.splitlines()[-1])
    assert before == ["dist_notebook", "dist_notebook._lazy"]
    assert after, "dist_notebook.RankError did not import the module that defines it"
