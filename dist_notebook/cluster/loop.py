"""One background event loop for the synchronous twins of the async API.

In a Jupyter kernel an event loop is already running on the main thread, so
``asyncio.run`` cannot be used there; the ``*_sync`` methods submit their coroutine to
this loop instead and wait for it, which works the same in a kernel and in a script.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="dist-notebook-loop", daemon=True
            )
            thread.start()
            _loop = loop
        return _loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run *coro* on the background loop and return its result; Ctrl-C cancels it."""
    future: Future[T] = asyncio.run_coroutine_threadsafe(coro, background_loop())
    try:
        return future.result()
    except KeyboardInterrupt:
        future.cancel()
        raise
