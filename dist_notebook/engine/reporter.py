"""``report()``: send one metrics record from a rank to the kernel's collector.

Records travel over a ZMQ PUSH socket to the collector's PULL socket in the kernel, in
batches (the wire format is ``dist_notebook.protocol``'s). Each message is signed with the
run's key (HMAC-SHA256) so the collector can drop anything that is not from this run.

The training thread does as little as possible: it turns the values into floats (a
one-element tensor on a GPU is kept as it is and read by the sender, so report() never
waits for the GPU) and appends one row to a deque (a few microseconds). A sender thread wakes every
``BATCH_SECONDS``, encodes the batch (binary columns, ``dist_notebook.columns``), signs it
and hands it to ZMQ, so encoding, HMAC and ZMQ stay off the training loop and the kernel
is woken once per batch, not per step.
The send never blocks and never waits on other ranks; the socket has no high-water mark,
so a slow collector delays records but never loses them.
"""

from __future__ import annotations

import hmac
import json
import os
import threading
import time
from collections import deque
from typing import Any

from .. import columns, protocol

_lock = threading.Lock()
# How often a rank ships its queued records. Each batch costs a wake-up, JSON, HMAC and a
# send on the rank, and a receive, a check and a hand-over in the kernel, whatever its
# size. Measured at ~120 records/s (a rank reporting every step): the sender thread used
# 0.6-0.75% of a core at 0.05 s, 0.25-0.37% at 0.1 s, 0.25% at 0.2 s. But report()-to-drawn
# is this wait plus the live view's (display/live.py) plus the browser's: with 0.1 s here
# its p95 was 280 ms in bench/live_view.py, over its 250 ms target, so 0.05 s it is.
BATCH_SECONDS = 0.05
# A message is at most this many records (the collector caps a message's size).
MAX_BATCH = 2000


class _Channel:
    """Queues records in the caller's thread; a sender thread ships them in batches."""

    def __init__(self, endpoint: str, key: bytes, run_id: str, rank: int) -> None:
        import zmq

        self.run_id = run_id
        self.rank = rank
        self.key = key
        self.socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUSH)
        self.socket.setsockopt(zmq.SNDHWM, 0)
        # On close, keep trying to deliver what is queued for up to 10 s.
        self.socket.setsockopt(zmq.LINGER, 10_000)
        self.socket.connect(endpoint)
        self.last_time: float | None = None
        self.sent = 0
        self._queue: deque[list[Any]] = deque()
        self._closing = threading.Event()
        self._sender = threading.Thread(target=self._run, name="dist-notebook-report", daemon=True)
        self._sender.start()

    def send(self, row: list[Any]) -> None:
        self._queue.append(row)  # deque.append is atomic: no lock on the training thread
        self.sent += 1

    def _ship(self, end: bool = False) -> None:
        while True:
            rows: list[list[Any]] = []
            while self._queue and len(rows) < MAX_BATCH:
                rows.append(_floats(self._queue.popleft()))
            last = not self._queue
            if rows or (end and last):
                payload = _payload(self.run_id, self.rank, rows, end and last)
                signature = hmac.digest(self.key, payload, "sha256")
                self.socket.send_multipart([signature, payload], copy=True)
            if last:
                return

    def _run(self) -> None:
        while not self._closing.wait(BATCH_SECONDS):
            self._ship()
        self._ship(end=True)

    def close(self) -> None:
        self._closing.set()
        self._sender.join()
        self.socket.close()


_channel: _Channel | None = None
_step_hooks: list[Any] = []


def open_channel(endpoint: str, key: bytes, run_id: str) -> None:
    """Point report() at a run's collector (called by the kernel at run start)."""
    global _channel
    with _lock:
        if _channel is not None:
            _channel.close()
        _channel = _Channel(endpoint, key, run_id, int(os.environ.get("RANK", "0")))


def close_channel() -> int:
    """Stop reporting for the current run; return how many records this rank sent.

    The last message carries the end mark, so the kernel knows every record arrived.
    """
    global _channel
    with _lock:
        channel, _channel = _channel, None
    if channel is None:
        return 0
    channel.close()
    return channel.sent


def add_step_hook(hook: Any) -> None:
    """Register a callable returning extra system fields (e.g. comm_time) for each record."""
    _step_hooks.append(hook)


def remove_step_hook(hook: Any) -> None:
    if hook in _step_hooks:
        _step_hooks.remove(hook)


def report(step: int | None = None, samples: Any = None, **metrics: Any) -> None:
    """Report one training step of this rank; never blocks, never a barrier.

    ``step``: the step number (an int). ``samples``: samples processed since the last
    report (gives samples/s). Every other keyword is a metric of yours, under any name
    (``loss``, ``lr``, ``seq``, ``rank`` ...), a number or a one-element tensor.
    Outside a ``%%dist_train`` run, report() does nothing.
    """
    channel = _channel
    if channel is None:
        return
    now = time.time()
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int):
            step = int(protocol.to_float(step))
    step_time = now - channel.last_time if channel.last_time is not None else None
    channel.last_time = now
    comm_time = gpu = None
    for hook in _step_hooks:
        extra = hook(now)
        comm_time = extra.get("comm_time", comm_time)
        gpu = extra.get("gpu", gpu)
    if comm_time is not None and step_time is not None and comm_time > step_time:
        comm_time = step_time  # a sampled estimate (commtime.py) never exceeds the step
    values = {name: _value(value) for name, value in metrics.items()}
    count = None if samples is None else _value(samples)
    channel.send([step, now, step_time, comm_time, count, values, gpu])


def _value(value: Any) -> Any:
    """A float now, or, for a one-element tensor on a GPU, the tensor itself: reading it
    here would make the training thread wait for the GPU (a sync every report); the
    sender thread reads it later, by when the step has long been computed."""
    if isinstance(value, float):
        return value
    device = getattr(value, "device", None)
    if getattr(device, "type", "cpu") != "cpu" and value.numel() == 1:
        return value.detach()
    return protocol.to_float(value)


def _payload(run_id: str, rank: int, rows: list[list[Any]], end: bool) -> bytes:
    """A batch as binary columns (``columns.py``: what the kernel reads fastest), or, for
    a batch that does not fit them (a step beyond 64 bits), as the protocol's JSON rows."""
    payload = columns.encode(run_id, rank, rows, end=end)
    if payload is None:
        # NaN and infinities travel as JSON's non-standard tokens between our own
        # processes; the kernel stores and serves them as valid JSON.
        message = protocol.wire_message(run_id, rank, rows, end=end)
        payload = json.dumps(message, separators=(",", ":")).encode()
    return payload


def _floats(row: list[Any]) -> list[Any]:
    """*row* with the tensors report() left for later read as floats (sender thread)."""
    metrics = row[5]
    if any(not isinstance(v, float) for v in metrics.values()):
        row[5] = {name: protocol.to_float(v) for name, v in metrics.items()}
    if row[4] is not None and not isinstance(row[4], float):
        row[4] = protocol.to_float(row[4])
    return row
