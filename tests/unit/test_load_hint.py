"""The stand-ins of the dist magics before ``%load_ext dist_notebook`` (their use in a real
kernel: tests/integration/test_kernel_messages.py)."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

from dist_notebook import load_hint
from dist_notebook.magics import (
    auto,
    cluster_magics,
    debug_magics,
    exec_magics,
    export_magics,
    reload_magics,
    runs_magics,
    train_magics,
)


def test_every_magic_has_a_stand_in() -> None:
    real = {}
    for module in (
        cluster_magics,
        exec_magics,
        train_magics,
        runs_magics,
        debug_magics,
        reload_magics,
        export_magics,
        auto,
    ):
        for cls in vars(module).values():
            for kind, names in getattr(cls, "magics", {}).items():
                for name in names:
                    real.setdefault(name, set()).add(kind)
    kinds = {name: set(load_hint.KINDS[kind]) for name, kind in load_hint.MAGICS.items()}
    assert kinds == real


@pytest.mark.parametrize(("cell", "shown"), [(None, "%dist_train"), ("pass", "%%dist_train")])
def test_a_stand_in_names_the_fix(cell: str | None, shown: str) -> None:
    magic = load_hint._stand_in("dist_train")
    with pytest.raises(UsageError) as info:
        magic("--steps 3", cell)
    assert str(info.value).startswith(f"{shown} is a dist-notebook magic")
    assert "run %load_ext dist_notebook first" in str(info.value)


def test_the_real_magics_are_kept(shell: Any) -> None:
    # The shell has loaded dist_notebook: the stand-ins must not replace its magics.
    before = shell.find_magic("dist_cluster")
    load_hint.load_ipython_extension(shell)
    assert shell.find_magic("dist_cluster") is before
    assert getattr(before, "__self__", None) is not None  # a method of ClusterMagics
