"""The kernel's end of the metrics channel: a ZMQ PULL socket read by one thread.

Each message (a batch of one rank's records, ``dist_notebook.protocol``'s wire format) is
checked against the run's key (HMAC-SHA256; anything else is dropped and counted), its
records are added to the in-memory ``RunMetrics`` (which feeds the live view), handed to
the run's sinks (exporters) and appended to the run store, one transaction per flush.
``wait_for_ends()`` waits until every rank's last message (the one marked ``end``) came, for
as long as records still arrive (progress, not a fixed time), so every record a rank sent
is stored before the run ends. The end mark says how many records the rank sent and gave
up; ``losses()`` compares that with what arrived, so a run that lost any says how many of
which rank's.

Memory is bounded without dropping a legitimate record: a message larger than
``MAX_MESSAGE_BYTES`` disconnects its sender inside ZMQ before it is buffered (a rank
never sends one: its batches are at most a few hundred kB), and each connection buffers at
most ``RCVHWM`` messages in the kernel; beyond that ZMQ holds the sender back, and a
rank's records wait in the rank's own memory, not the kernel's.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from .. import columns, protocol
from ..metrics import RunMetrics
from ..store import StoreError, StoreWriter
from ..store.writer import MetricRows

log = logging.getLogger("dist_notebook")
FLUSH_EVERY = 0.2  # seconds between batched writes to the run store
# Records taken from the socket before the loop looks at the clock again: under a flood
# the store is still written every FLUSH_EVERY and what waits in memory stays bounded.
DRAIN_RECORDS = 20_000
MAX_MESSAGE_BYTES = 4 << 20
RCVHWM = 16  # messages buffered per connection
# The end of a run waits for the ranks' end marks while records keep coming, and gives up
# after END_IDLE_S with none arriving (a rank's backlog is bounded: reporter.MAX_QUEUED).
END_IDLE_S = 10.0

Sink = Callable[[list[protocol.Record]], None]


_FLOAT_OR_NONE = frozenset((float, type(None)))
_INT_OR_NONE = frozenset((int, type(None)))
_FLOAT = frozenset((float,))


def decode(msg: Any, run_id: str) -> tuple[int, list[protocol.Record], bool]:
    """``protocol.decode_message``, faster for the rows ``report()`` sends.

    A rank's rows hold floats (report() converts every value) and no GPU sample on CPU:
    those become Records here with type checks only (about a third of the protocol's
    general decoding, which converts every value). A message with any other row (ints,
    "nan" strings, a GPU sample, a malformed row) is decoded, and judged, by the protocol.
    """
    if type(msg) is dict and msg.get("v") == protocol.PROTOCOL_VERSION and msg.get("run") == run_id:
        rank, rows = msg.get("rank"), msg.get("records")
        if type(rank) is int and type(rows) is list:
            records = []
            Record, floats, ints = protocol.Record, _FLOAT_OR_NONE, _INT_OR_NONE
            only_floats = _FLOAT
            for row in rows:
                if type(row) is not list or len(row) != 7:
                    break
                step, time_, step_time, comm_time, samples, metrics, gpu = row
                if (
                    gpu is not None
                    or type(time_) is not float
                    or type(step) not in ints
                    or type(step_time) not in floats
                    or type(comm_time) not in floats
                    or type(samples) not in floats
                    or type(metrics) is not dict
                    or not only_floats.issuperset(map(type, metrics.values()))
                ):
                    break
                records.append(
                    Record(rank, step, time_, step_time, comm_time, samples, metrics, None)
                )
            else:
                return rank, records, bool(msg.get("end"))
    return protocol.decode_message(msg, run_id)


class Collector:
    def __init__(
        self,
        run_id: str,
        key: bytes,
        metrics: RunMetrics,
        writer: StoreWriter | None,
        ip: str = "127.0.0.1",
        sinks: list[Sink] | None = None,
    ) -> None:
        self.run_id = run_id
        self.key = key
        self.metrics = metrics
        self.writer = writer
        self.sinks = list(sinks or [])
        self.rejected = 0
        self.received = 0
        self.cpu = 0.0  # CPU seconds the collector's thread has used (decoding, storing)
        self.ended: set[int] = set()
        self.by_rank: dict[int, int] = {}  # records received from each rank
        self.told: dict[int, tuple[int, int]] = {}  # a rank's end mark: (sent, given up)
        self.unstored = 0  # records the store refused for good (given up)
        self.store_error: str | None = None
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._socket = self._ctx.socket(zmq.PULL)
        self._socket.setsockopt(zmq.RCVHWM, RCVHWM)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self._socket.setsockopt(zmq.LINGER, 0)
        port = self._socket.bind_to_random_port(f"tcp://{ip}")
        self.endpoint = f"tcp://{ip}:{port}"
        # The records not yet stored, as the store's rows: the records themselves are
        # dropped once the live view and the sinks have them.
        self._pending = MetricRows(run_id)
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
            try:
                if time.monotonic() - last_flush >= FLUSH_EVERY:
                    self._flush()
                    last_flush = time.monotonic()
                self._take(poller)
            except Exception as e:  # one bad message or write is never the collector's end
                log.warning("the metrics collector skipped a message: %s: %s", type(e).__name__, e)
            self.cpu = time.thread_time()
        self._flush()
        self.cpu = time.thread_time()

    def _take(self, poller: zmq.Poller) -> None:
        """Take what the socket holds (at most DRAIN_RECORDS records) into memory."""
        batch: list[protocol.Record] = []
        ends: list[int] = []
        if poller.poll(50):
            while len(batch) < DRAIN_RECORDS:
                try:
                    frames = self._socket.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                batch.extend(self._verify(frames, ends))
        if batch:
            self.metrics.add(batch)
            self._feed_sinks(batch)
        del batch  # the records: what waits for the store is its rows
        with self._ended_event:  # said once the rank's records are in
            self.ended.update(ends)
            self._ended_event.notify_all()

    def _verify(self, frames: list[bytes], ends: list[int]) -> list[protocol.Record]:
        """The records of one signed message; [] if forged or malformed. The rank of a
        message marked as its last goes to *ends*."""
        if len(frames) != 2:
            self.rejected += 1
            return []
        signature, payload = frames
        if not hmac.compare_digest(signature, hmac.digest(self.key, payload, "sha256")):
            self.rejected += 1
            return []
        try:
            at = columns.is_columns(payload)
            if at >= 0:  # report()'s columns (columns.py)
                rank, records, end, texts = columns.read(payload, at, self.run_id)
            else:  # rows: the end mark, or a batch columns.py does not fit
                message = json.loads(payload)
                rank, records, end = decode(message, self.run_id)
                texts = None
                if end:
                    self._told(rank, message)
        except (ValueError, protocol.WireError):
            self.rejected += 1
            return []
        if end:
            ends.append(rank)
        self._pending.add(records, texts)
        self.received += len(records)
        self.by_rank[rank] = self.by_rank.get(rank, 0) + len(records)
        return records

    def _told(self, rank: int, message: dict[str, Any]) -> None:
        sent, dropped = message.get("sent"), message.get("dropped")
        if type(sent) is int and type(dropped) is int and sent >= 0 and dropped >= 0:
            self.told[rank] = (sent, dropped)

    def _feed_sinks(self, batch: list[protocol.Record]) -> None:
        for sink in list(self.sinks):
            try:
                sink(batch)
            except Exception as e:  # an exporter's failure must never stop the records
                log.warning("a metrics exporter failed and was turned off: %s", e)
                self.sinks.remove(sink)

    def _flush(self) -> None:
        if not self._pending or self.writer is None:
            self._pending = MetricRows(self.run_id)
            return
        try:
            self.writer.append_rows(self._pending)
        except StoreError as e:
            # Never stop training over the store: keep the records in memory (the next
            # flush tries them again, with what came since), say so once.
            if self.store_error is None:
                log.warning("%s", e)
            self.store_error = str(e)
            return
        except Exception as e:  # records the store cannot take (never a retry): counted
            n = len(self._pending)
            self.unstored += n
            log.warning("%d records could not be stored and are given up: %s", n, e)
        self._pending = MetricRows(self.run_id)

    def wait_for_ends(self, ranks: set[int], timeout: float = END_IDLE_S) -> set[int]:
        """Wait until *ranks* sent their end marks, as long as records keep arriving:
        return once *timeout* s pass with none arriving; the ranks still missing."""
        seen, since = self.received, time.monotonic()
        with self._ended_event:
            while not ranks <= self.ended:
                if self.received != seen:
                    seen, since = self.received, time.monotonic()
                elif time.monotonic() - since >= timeout:
                    break
                self._ended_event.wait(0.2)
            return ranks - self.ended

    def losses(self, ranks: list[int]) -> dict[int, int | None]:
        """The records lost of each of *ranks* that lost any: given up on the rank, or
        sent and never received; None for a rank whose end mark never came (unknown)."""
        lost: dict[int, int | None] = {}
        for rank in ranks:
            if rank not in self.told:
                lost[rank] = None
                continue
            sent, dropped = self.told[rank]
            n = dropped + max(0, sent - self.by_rank.get(rank, 0))
            if n:
                lost[rank] = n
        return lost

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._socket.close()
