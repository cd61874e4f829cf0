"""Kernel side: start, stop and restart engines; run code on ranks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from .cluster import ClusterError, ClusterState, DistCluster
    from .facts import RankInfo
    from .spec import ClusterConfigError, ClusterSpec

__all__ = [
    "ClusterConfigError",
    "ClusterError",
    "ClusterSpec",
    "ClusterState",
    "DistCluster",
    "RankInfo",
]

# Imported on first use, so that ``cluster.forkserver`` starts without ipyparallel's
# client (see ``dist_notebook.load_ipython_extension``).
_LAZY = {
    "ClusterError": "cluster",
    "ClusterState": "cluster",
    "DistCluster": "cluster",
    "RankInfo": "facts",
    "ClusterConfigError": "spec",
    "ClusterSpec": "spec",
}
__getattr__ = lazy_attributes(__name__, _LAZY)
