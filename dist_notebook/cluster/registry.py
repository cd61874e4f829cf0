"""Live clusters of this process, stopped at interpreter exit.

One atexit hook over a WeakSet (as ipyparallel does): a cluster dropped by the user
is not kept alive by the registry, and every live one is stopped when the kernel exits.
"""

from __future__ import annotations

import atexit
import logging
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cluster import DistCluster

_live: weakref.WeakSet[Any] = weakref.WeakSet()
_registered = False
log = logging.getLogger("dist_notebook")


def add(cluster: DistCluster) -> None:
    global _registered
    _live.add(cluster)
    if not _registered:
        atexit.register(stop_all)
        _registered = True


def discard(cluster: DistCluster) -> None:
    _live.discard(cluster)


def live() -> list[Any]:
    return list(_live)


def stop_all() -> None:
    for cluster in list(_live):
        try:
            cluster.stop_sync()
        except Exception as e:  # keep stopping the others; say which one failed
            log.warning("stopping %r at exit: %s", cluster, e)
