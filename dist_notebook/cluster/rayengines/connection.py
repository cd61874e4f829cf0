"""The kernel's connection to Ray, shared by the engine sets it starts (``launcher``).

An engine set holds the connection while it runs (``hold``): the first one connects
(``rayconnect.connect``, as ``ray.init()`` does) and the last one stopped closes it
(``release``: ``ray.shutdown``). A connection the user made before ours (``ray.init()``
in the notebook) is theirs: it is used and never closed. A stop that gave up on Ray
(its cluster lost: Ray's calls then block for good) drops the connection instead
(``abandon``): ``ray.shutdown`` in a thread of its own, so that a later start in this
kernel connects afresh rather than through the dead one. A start waits for that shutdown
to end (it clears Ray's state, a connection made meanwhile with it), up to
``DROP_WAIT_S``; past that it says so in one line instead of connecting.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from ..rayconnect import RayConnectError, connect

log = logging.getLogger("dist_notebook")

_held = 0  # engine sets running on the connection this module made
_generation = 0  # which connection of ours: one more after each abandon
_lock = threading.Lock()
_dropping: threading.Thread | None = None  # an abandoned connection's shutdown
DROP_WAIT_S = 15.0  # how long a start waits for that shutdown to end


def hold(address: str) -> tuple[Any, int | None]:
    """Connect (or use the connection); the ``ray`` module and the caller's hold on our
    connection, for ``release`` (None: the user's own, which it must not close)."""
    global _held
    with _lock:
        if _dropping is not None:  # a connect while Ray's shutdown runs is undone by it
            _dropping.join(DROP_WAIT_S)
            if _dropping.is_alive():
                raise RayConnectError(
                    "the connection to a lost Ray cluster is still closing: run %dist_cluster "
                    "start again in a minute (or restart the kernel)"
                )
        ray = sys.modules.get("ray")
        fresh = ray is None or not ray.is_initialized()
        ray = connect(address)
        if not (fresh or _held > 0):
            return ray, None
        _held += 1
        return ray, _generation


def release(ray: Any, token: int | None) -> None:
    """An engine set is done with the connection: the last of ours closes it."""
    global _held
    with _lock:
        if token is None or token != _generation:  # not ours, or abandoned since
            return
        _held -= 1
        if _held == 0 and ray.is_initialized():
            ray.shutdown()


def abandon(token: int | None) -> None:
    """A stop gave up on Ray: drop the connection in the background (see the module)."""
    global _held, _generation, _dropping
    with _lock:
        if token is None or token != _generation:
            return
        _held = 0  # every engine set on it is lost with it
        _generation += 1
        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            return

        def drop() -> None:
            try:
                ray.shutdown()
            except Exception as e:  # nothing left to close: the connection was dead
                log.debug("ray.shutdown after a lost cluster: %s", e)

        _dropping = threading.Thread(target=drop, name="dist-notebook-ray-drop", daemon=True)
        _dropping.start()


def held() -> int:
    """How many engine sets hold our connection (for tests and messages)."""
    return _held
