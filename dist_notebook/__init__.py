"""dist-notebook: interactive distributed PyTorch training from Jupyter.

%load_ext dist_notebook
%dist_cluster start -n 2 --cpu
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_attributes

if TYPE_CHECKING:
    from .cluster import ClusterSpec, DistCluster
    from .cluster.onranks.execute import RankError
    from .cluster.onranks.mismatch import CollectiveMismatch
    from .engine import report
    from .training import load_run

__all__ = [
    "ClusterSpec",
    "CollectiveMismatch",
    "DistCluster",
    "RankError",
    "load_ipython_extension",
    "load_run",
    "report",
]

# Imported on first use: ``%load_ext`` starts the fork server before the magics' imports
# (ipyparallel's client, widgets), and an engine importing ``dist_notebook.engine`` does
# not load the kernel's side.
_LAZY = {
    "ClusterSpec": "cluster",
    "DistCluster": "cluster",
    # What a cell on the ranks raises (``except RankError as e``: ``e.rank``, ``e.ename``,
    # ``e.failures``), and the RankError raised for collectives the ranks disagree on.
    "RankError": "cluster.onranks.execute",
    "CollectiveMismatch": "cluster.onranks.mismatch",
    "report": "engine",
    "load_run": "training",
}
__getattr__ = lazy_attributes(__name__, _LAZY)


def load_ipython_extension(ipython):  # type: ignore[no-untyped-def]
    from .cluster import forkserver

    # Engines' imports (torch, ipyparallel) start now, while the magics load and the
    # user writes the next cell; local engines are then forked with them done.
    forkserver.prestart()
    from .magics import register

    register(ipython)
