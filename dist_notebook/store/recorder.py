"""Best-effort writes for the kernel: the run store must never stop a cluster or a run."""

from __future__ import annotations

import logging
import weakref
from typing import Any

import psutil

from .schema import StoreError
from .writer import StoreWriter

log = logging.getLogger("dist_notebook")


# Warnings already given, by writer: a store that fails fails for every write of a
# cell (3-4 of them), and one warning says it all.
_warned: weakref.WeakKeyDictionary[StoreWriter, set[str]] = weakref.WeakKeyDictionary()


def record(writer: StoreWriter | None, method: str, *args: Any, **kwargs: Any) -> None:
    """Call ``writer.method(*args, **kwargs)``; without a writer, or on a StoreError
    (locked, full or corrupt store), say why in the log (once) and go on."""
    if writer is None:
        return
    try:
        getattr(writer, method)(*args, **kwargs)
    except StoreError as e:
        warn_once(writer, str(e))


def warn_once(key: Any, message: str) -> None:
    """Log *message* as a warning unless it was already given for *key*."""
    seen = _warned.setdefault(key, set())
    if message not in seen:
        seen.add(message)
        log.warning("%s", message)


class LazyWriter:
    """The run store's writer, opened on first use (its orphans closed then), or None
    for good once the store cannot be opened: said once (*unrecorded* says what goes
    unrecorded), never per write."""

    def __init__(self, writer: StoreWriter | None, unrecorded: str) -> None:
        self._writer = writer
        self._error: str | None = None
        self._unrecorded = unrecorded

    def get(self) -> StoreWriter | None:
        if self._writer is None and self._error is None:
            try:
                self._writer = StoreWriter()
                self._writer.close_orphans(lambda pid: psutil.pid_exists(pid) and pid != 0)
            except StoreError as e:
                self._error = str(e)
                log.warning("%s; %s", e, self._unrecorded)
        return self._writer
