"""Best-effort writes for the kernel: the run store must never stop a cluster or a run."""

from __future__ import annotations

import logging
from typing import Any

from .schema import StoreError
from .writer import StoreWriter

log = logging.getLogger("dist_notebook")


def record(writer: StoreWriter | None, method: str, *args: Any, **kwargs: Any) -> None:
    """Call ``writer.method(*args, **kwargs)``; without a writer, or on a StoreError
    (locked, full or corrupt store), say why in the log and go on."""
    if writer is None:
        return
    try:
        getattr(writer, method)(*args, **kwargs)
    except StoreError as e:
        log.warning("%s", e)
