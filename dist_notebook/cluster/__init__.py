"""Kernel side: start, stop and restart engines; run code on ranks."""

from .cluster import ClusterError, ClusterState, DistCluster, RankInfo
from .spec import ClusterConfigError, ClusterSpec

__all__ = [
    "ClusterConfigError",
    "ClusterError",
    "ClusterSpec",
    "ClusterState",
    "DistCluster",
    "RankInfo",
]
