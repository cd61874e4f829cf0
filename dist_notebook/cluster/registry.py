"""Live clusters of this process, stopped at interpreter exit; who hears of a stop.

One atexit hook over a WeakSet (as ipyparallel does): a cluster dropped by the user
is not kept alive by the registry, and every live one is stopped when the kernel exits.
A module above the cluster that acts when one stops (the warm pool starts a spare)
listens here (``on_stopped``), so the cluster's owner calls nothing above itself.
"""

from __future__ import annotations

import atexit
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cluster import DistCluster
    from .spec import ClusterSpec

_live: weakref.WeakSet[Any] = weakref.WeakSet()
_registered = False
_stop_listeners: list[Callable[[ClusterSpec], None]] = []
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


def on_stopped(listener: Callable[[ClusterSpec], None]) -> None:
    """Call *listener* with the spec of each cluster its owner stops."""
    if listener not in _stop_listeners:
        _stop_listeners.append(listener)


def stopped(spec: ClusterSpec) -> None:
    """A cluster of *spec* was stopped by its owner: tell the listeners."""
    for listener in list(_stop_listeners):
        try:
            listener(spec)
        except Exception as e:  # one listener's failure is no failed stop; say it
            log.warning("after a stop of a cluster: %s", e)
