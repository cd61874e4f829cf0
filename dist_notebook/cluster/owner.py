"""The owner of a cluster: the one object that stops and interrupts it, for everybody.

Every entry point acts through it: ``%dist_cluster stop`` and the magics' interrupt, a
script's ``DistCluster(...).start_sync()``, the warm pool's spares, and the side panel,
whose Stop and Interrupt arrive as rows of the run store's control queue
(dist_notebook/store/control.py) that the owner's watcher thread takes and answers. The
cluster makes its owner and starts the watcher each time it becomes ready (every life,
a restart after a failure included), so a cluster started from a plain script answers
the panel as one started from a notebook does. The watcher runs beside a blocking cell,
which holds the main thread but not this one.

A training run registers here while it goes (``run``), so that a stop cancels it first
and lets it record its end, and an interrupt cancels it rather than signalling ranks.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ..protocol import ACTIVE_RUN_STATES, ClusterState
from ..store import StoreError
from ..store.control import ControlQueue
from . import registry
from .errors import ClusterError

if TYPE_CHECKING:
    from .cluster import DistCluster

log = logging.getLogger("dist_notebook")
POLL_S = 0.2  # how often the watcher looks for a request: the panel's Stop waits this long
# How long a stop waits for a cancelled run to end (its ranks interrupted, its last
# records in) before the cluster is stopped under it.
STOP_WAIT_S = 30.0
CHANGE_GRACE_S = 60.0  # beyond the start timeout, for a restart or scale to end


class ClusterOwner:
    def __init__(self, cluster: DistCluster) -> None:
        self.cluster = cluster
        self.run: Any = None  # the training run in progress, set by the run itself
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._closed = threading.Event()

    # --- what every entry point calls ------------------------------------------
    def active_run(self) -> Any:
        run = self.run
        if run is not None and run.state in ACTIVE_RUN_STATES:
            return run
        return None

    def interrupt(self) -> str:
        """A training run in progress is cancelled; otherwise every rank gets SIGINT
        (the running cell raises KeyboardInterrupt). A start, restart or scale under
        way finishes first."""
        self._after_change()
        run = self.active_run()
        if run is not None:
            run.stop()
            return f"run {run.name} cancelled"
        self.cluster.interrupt()
        return "ranks interrupted"

    def stop(self, reason: str = "%dist_cluster stop") -> str:
        """Cancel the run in progress, let it end, then stop the cluster (idempotent);
        a spare of the same spec is started for the next start if the pool keeps one."""
        self._stopping.set()
        try:
            self._after_change()
            run = self.active_run()
            if run is not None:
                log.info("%s: cancelling run %s first", reason, run.name)
                run.stop(
                    why=f"{reason} stopped cluster {self.cluster.id}; "
                    "%dist_cluster start makes a new one"
                )
                deadline = time.monotonic() + STOP_WAIT_S
                while run.state in ACTIVE_RUN_STATES and time.monotonic() < deadline:
                    time.sleep(0.05)
            self._closed.set()
            self.cluster.stop_sync()
        finally:
            self._stopping.clear()
        registry.stopped(self.cluster.spec)  # the warm pool starts a spare (pool.py)
        return "stopped"

    def _after_change(self) -> None:
        """Wait for a start, restart or scale under way (on another thread) to end: a
        stop in the middle of one took its engines from under it (it failed, or raised
        an AttributeError), an interrupt reached half-made ranks."""
        changing = (ClusterState.STARTING, ClusterState.RESTARTING)
        deadline = time.monotonic() + self.cluster.spec.start_timeout + CHANGE_GRACE_S
        while self.cluster.state in changing and time.monotonic() < deadline:
            time.sleep(0.05)

    def refuse_during_run(self, doing: str) -> None:
        """Raise ClusterError (one line, the fix in it) when a training run goes on in
        the background on these ranks: *doing* would wait for the whole run, or (a
        scale that removes ranks) end it."""
        run = self.active_run()
        if run is not None:
            raise ClusterError(
                f"{doing} while run {run.name} trains in the background on these ranks: "
                "wait until it ends (%dist_runs shows it), or stop it (its dashboard's Stop, "
                "or the side panel), then try again"
            )

    def stopping(self) -> bool:
        return self._stopping.is_set() or self.cluster.state == ClusterState.STOPPING

    def wait_for_stop(self, timeout: float) -> None:
        """Wait (up to *timeout* s) for a stop under way, e.g. Stop in the panel."""
        deadline = time.monotonic() + timeout
        while self.stopping() and time.monotonic() < deadline:
            time.sleep(0.1)

    # --- the panel's requests ---------------------------------------------------
    def watch(self) -> None:
        """Take the panel's requests for this life of the cluster (a watcher that
        ended with an earlier life is started anew)."""
        with self._lock:
            if self._watcher is not None and self._watcher.is_alive():
                return
            self._closed.clear()
            self._watcher = threading.Thread(
                target=self._loop, name=f"dist-notebook-owner-{self.cluster.id}", daemon=True
            )
            self._watcher.start()

    def close(self) -> None:
        self._closed.set()

    def join(self, timeout: float) -> None:
        """Wait (at most *timeout* s) for the watcher to end: the answer to a request it
        acted on (a Stop from the panel) is written before its process exits."""
        watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout)

    def _loop(self) -> None:
        try:
            queue = ControlQueue()
        except StoreError as e:
            log.warning("%s; the panel's Stop and Interrupt will not reach this cluster", e)
            return
        try:
            while not self._closed.wait(POLL_S):
                # A failed cluster still has an owner: the panel's Stop is its stop here
                # (the server acting alone would stop what this kernel may restart).
                if self.cluster.state in (ClusterState.STOPPED, ClusterState.ORPHANED):
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
                result = self.stop(reason="Stop in the JupyterLab panel")
            else:
                result = self.interrupt()
            queue.finish(seq, result)
        except Exception as e:  # the request gets the error; the owner keeps watching
            log.warning("%s from the panel failed: %s", action, e)
            queue.finish(seq, "error", f"{type(e).__name__}: {e}")
