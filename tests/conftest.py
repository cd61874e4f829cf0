"""Fixtures shared by every test directory.

- Every run writes to a throwaway run store (``DIST_NOTEBOOK_STORE``), set before any
  cluster starts, so engines and the kernel never touch the user's own store.
- ``shell``: one IPython shell with the extension loaded, for the whole session.
- ``cluster2``: one 2-rank CPU cluster, started once through ``%dist_cluster start`` and
  shared by every test that does not need fresh engines. Tests that check start, stop,
  restart or process exit start clusters of their own.
- ``@pytest.mark.requires_gpus(n)``: skipped unless this host has n CUDA GPUs, counted
  with ``nvidia-smi`` (never by initialising CUDA in the test process).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import pytest

pytest_plugins = ["pytest_jupyter.jupyter_server"]

STORE_ENV = "DIST_NOTEBOOK_STORE"


@lru_cache(maxsize=1)
def gpu_count() -> int:
    from dist_notebook.cluster.devices import visible_gpus

    return len(visible_gpus())


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers(name="requires_gpus"):
        wanted = int(marker.args[0]) if marker.args else 1
        have = gpu_count()
        if have < wanted:
            pytest.skip(f"needs {wanted} CUDA GPU(s), this host has {have}")


@pytest.fixture(scope="session", autouse=True)
def throwaway_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Point the run store at a temporary file for the whole session (engines inherit it)."""
    path = str(tmp_path_factory.mktemp("store") / "runs.sqlite")
    old = os.environ.get(STORE_ENV)
    os.environ[STORE_ENV] = path
    yield path
    if old is None:
        os.environ.pop(STORE_ENV, None)
    else:
        os.environ[STORE_ENV] = old


@pytest.fixture(scope="session")
def shell(throwaway_store: str) -> Any:
    """The session's IPython shell with ``%load_ext dist_notebook`` done."""
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "dist_notebook")
    return ip


def session_of(shell: Any) -> Any:
    from dist_notebook.magics.session import Session

    return Session.for_shell(shell)


@pytest.fixture(scope="session")
def cluster2(shell: Any) -> Iterator[Any]:
    """A 2-rank CPU (gloo) cluster started with the magic, shared by the session."""
    session = session_of(shell)
    shell.run_line_magic("dist_cluster", "start -n 2 --cpu")
    cluster = session.cluster
    assert cluster is not None and cluster.state.value == "ready"
    yield cluster
    cluster.stop_sync()
    if session.cluster is cluster:
        session.cluster = None


@pytest.fixture
def no_cluster(shell: Any) -> Iterator[Any]:
    """The shell with no current cluster (the shared one, if any, is kept and put back)."""
    session = session_of(shell)
    saved = session.cluster
    session.cluster = None
    yield shell
    session.cluster = saved
