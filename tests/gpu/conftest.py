"""The GPU tests also run on their own, on a GPU machine without the Jupyter test plugins
(``pytest --confcutdir=tests/gpu tests/gpu``, as ``bench/gpu.sh`` does): the skip of
``requires_gpus`` and the throwaway run store are then set up here as well. Under the
top-level conftest both run twice, which is harmless."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


def pytest_runtest_setup(item: pytest.Item) -> None:
    from dist_notebook.cluster.devices import visible_gpus  # nvidia-smi, never CUDA here

    for marker in item.iter_markers(name="requires_gpus"):
        wanted = int(marker.args[0]) if marker.args else 1
        have = len(visible_gpus())
        if have < wanted:
            pytest.skip(f"needs {wanted} CUDA GPU(s), this host has {have}")


@pytest.fixture(scope="session", autouse=True)
def gpu_throwaway_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    name = "DIST_NOTEBOOK_STORE"
    if os.environ.get(name):
        yield
        return
    os.environ[name] = str(tmp_path_factory.mktemp("gpu-store") / "runs.sqlite")
    yield
    os.environ.pop(name, None)
