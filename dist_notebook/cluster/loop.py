"""One background event loop for the synchronous twins of the async API.

In a Jupyter kernel an event loop is already running on the main thread, so
``asyncio.run`` cannot be used there; the ``*_sync`` methods submit their coroutine to
this loop instead and wait for it, which works the same in a kernel and in a script.

The twins are not written by hand: ``start_sync = sync_twin(start)`` in a class body
derives one from its async method (ipyparallel's ``AsyncFirst`` idea, typed: mypy checks
a twin's arguments and result as the method's).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Concatenate, ParamSpec, TypeVar

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")

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


def sync_twin(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], T]:
    """The synchronous twin of the async *method*: the same arguments, run to its end
    on the background loop (``run_sync``), its result returned.

    The twin calls the method by name on its object, so a subclass that overrides the
    async method gets a twin that runs the override."""
    name = method.__name__

    @functools.wraps(method)
    def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(getattr(self, name)(*args, **kwargs))

    twin.__name__ = f"{name}_sync"
    twin.__qualname__ = f"{method.__qualname__}_sync"
    twin.__doc__ = f"``{name}`` run to its end from synchronous code (a script, a cell)."
    return twin
