"""The owning kernel's side of panel actions: a thread that takes the cluster's control
requests (dist_notebook/store/control.py) and carries them out through the Session, so
Stop in the panel is ``%dist_cluster stop`` in this kernel and Interrupt is this
kernel's interrupt of the ranks. It runs beside a blocking cell, which holds the main
thread but not this one."""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..store import StoreError
from ..store.control import ControlQueue

log = logging.getLogger("dist_notebook")
POLL_S = 0.2  # how often the kernel looks for a request: the panel's Stop waits this long


class ControlWatcher:
    """Watches the control requests of *cluster* until it stops."""

    def __init__(self, session: Any, cluster: Any) -> None:
        self.session = session
        self.cluster = cluster
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"dist-notebook-control-{cluster.id}", daemon=True
        )

    def start(self) -> ControlWatcher:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        try:
            queue = ControlQueue()
        except StoreError as e:
            log.warning("%s; the panel's Stop and Interrupt will not reach this kernel", e)
            return
        try:
            while not self._stop.wait(POLL_S):
                if self.cluster.state.value in ("stopped", "failed"):
                    return
                for seq, action in self._take(queue):
                    self._act(queue, seq, action)
        finally:
            queue.close()

    def _take(self, queue: ControlQueue) -> list[tuple[int, str]]:
        try:
            return queue.take(self.cluster.id)
        except StoreError as e:  # a locked store: try again at the next poll
            log.warning("%s", e)
            return []

    def _act(self, queue: ControlQueue, seq: int, action: str) -> None:
        try:
            if action == "stop":
                result = self.session.stop(self.cluster, reason="Stop in the JupyterLab panel")
            else:
                result = self.session.interrupt(self.cluster)
            queue.finish(seq, result)
        except Exception as e:  # the request gets the error; the kernel keeps watching
            log.warning("%s from the panel failed: %s", action, e)
            queue.finish(seq, "error", f"{type(e).__name__}: {e}")
