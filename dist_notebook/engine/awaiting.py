"""A top-level ``await`` in a cell on a rank runs there, as in the notebook's own kernel.

IPython's autoawait compiles such a cell to a coroutine. ipykernel runs it on its own
running loop only through a path that reads the shell-channel thread of its subshells
(``shell_channel_thread.parent_thread``), which an ipyparallel engine does not have: the
read raised after the coroutine had been started, no reply was ever sent, and the cell
never returned (plain ipyparallel hangs the same way). With ``run_nested`` as the
shell's ``loop_runner`` ipykernel takes its other path, ``shell.run_cell``, and IPython
hands the coroutine to this runner: it runs to its end on a loop of its own in the
engine's main thread, so its output, a rank's error and Ctrl-C (KeyboardInterrupt in the
main thread) behave as in any cell. What it awaits must not need the engine's own loop
(its ZMQ streams), which waits meanwhile, as it does for any cell.
"""

from __future__ import annotations

import asyncio
from asyncio import events
from collections.abc import Coroutine
from typing import Any

# Set on the engine's shell by boot/engine.py (InteractiveShell.loop_runner).
LOOP_RUNNER = "dist_notebook.engine.awaiting.run_nested"


def run_nested(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run *coro* to its end on a new event loop, from inside the engine's running one.

    asyncio refuses a second loop in a thread whose loop is running; the running loop is
    set aside for the while (asyncio's ``_get_running_loop``/``_set_running_loop``, the
    helpers it exports for loop implementations) and put back after."""
    outer = events._get_running_loop()
    events._set_running_loop(None)
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            _cancel_left(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
            events._set_running_loop(outer)


def _cancel_left(loop: asyncio.AbstractEventLoop) -> None:
    """Tasks the cell started and left running end with it (the loop closes)."""
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in left:
        task.cancel()
    if left:
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
