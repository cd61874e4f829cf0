"""The kernel's end of the metrics channel: a ZMQ PULL socket read by one thread.

Records are checked against the run's key (HMAC-SHA256; anything else is dropped and
counted), added to the in-memory ``RunMetrics`` (which feeds the dashboard) and
appended to the run store in small batches. ``close()`` waits until every rank has
sent its end marker, so every record a rank sent is stored before the run ends.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from typing import Any

import zmq

from ..metrics import RunMetrics
from ..store import StoreError, StoreWriter

log = logging.getLogger("dist_notebook")
FLUSH_EVERY = 0.2  # seconds between batched writes to the run store


class Collector:
    def __init__(
        self,
        run_id: str,
        key: bytes,
        metrics: RunMetrics,
        writer: StoreWriter | None,
        ip: str = "127.0.0.1",
    ) -> None:
        self.run_id = run_id
        self.key = key
        self.metrics = metrics
        self.writer = writer
        self.rejected = 0
        self.received = 0
        self.ended: set[int] = set()
        self.store_error: str | None = None
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._socket = self._ctx.socket(zmq.PULL)
        self._socket.setsockopt(zmq.RCVHWM, 0)
        self._socket.setsockopt(zmq.LINGER, 0)
        port = self._socket.bind_to_random_port(f"tcp://{ip}")
        self.endpoint = f"tcp://{ip}:{port}"
        self._pending: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._ended_event = threading.Condition()
        self._thread = threading.Thread(
            target=self._loop, name="dist-notebook-collector", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        last_flush = time.monotonic()
        while not self._stop.is_set():
            batch: list[dict[str, Any]] = []
            if poller.poll(50):
                while True:
                    try:
                        frames = self._socket.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    batch.extend(self._verify(frames))
            if batch:
                self.received += len(batch)
                self.metrics.add(batch)
                self._pending.extend(batch)
            if time.monotonic() - last_flush >= FLUSH_EVERY:
                self._flush()
                last_flush = time.monotonic()
        self._flush()

    def _verify(self, frames: list[bytes]) -> list[dict[str, Any]]:
        """The records of one signed message (a batch or a single record); [] if forged."""
        if len(frames) != 2:
            self.rejected += 1
            return []
        signature, payload = frames
        expected = hmac.new(self.key, payload, hashlib.sha256).digest()
        if not hmac.compare_digest(signature, expected):
            self.rejected += 1
            return []
        try:
            decoded = json.loads(payload)
        except ValueError:
            self.rejected += 1
            return []
        items = decoded if isinstance(decoded, list) else [decoded]
        return [rec for rec in map(self._accept, items) if rec is not None]

    def _accept(self, rec: Any) -> dict[str, Any] | None:
        # A record this thread cannot file would stop it, and with it the whole run's
        # metrics: anything but {"run", "rank": int, "time": number, ...} is dropped.
        if (
            not isinstance(rec, dict)
            or rec.pop("run", None) != self.run_id
            or type(rec.get("rank")) is not int
            or not isinstance(rec.get("time"), int | float)
        ):
            self.rejected += 1
            return None
        if rec.pop("end", False):
            with self._ended_event:
                self.ended.add(rec["rank"])
                self._ended_event.notify_all()
            return None
        return rec

    def _flush(self) -> None:
        if not self._pending or self.writer is None:
            self._pending.clear()
            return
        batch, self._pending = self._pending, []
        try:
            self.writer.append_metrics(self.run_id, batch)
        except StoreError as e:
            # Never stop training over the store: keep the records in memory, say so once.
            if self.store_error is None:
                log.warning("%s", e)
            self.store_error = str(e)
            self._pending = batch + self._pending

    def wait_for_ends(self, ranks: set[int], timeout: float) -> set[int]:
        """Wait until *ranks* sent their end marker; return the ranks still missing."""
        deadline = time.monotonic() + timeout
        with self._ended_event:
            while not ranks <= self.ended:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._ended_event.wait(left)
            return ranks - self.ended

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._socket.close()
