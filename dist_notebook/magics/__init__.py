"""IPython magics: thin adapters that parse arguments, call the API and show results."""

from __future__ import annotations

from typing import Any

from .session import Session


def register(ipython: Any) -> None:
    from .cluster_magics import ClusterMagics
    from .exec_magics import ExecMagics
    from .train_magics import TrainMagics

    session = Session.for_shell(ipython)
    for cls in (ClusterMagics, ExecMagics, TrainMagics):
        ipython.register_magics(cls(ipython, session=session))
