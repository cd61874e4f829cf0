"""``report()``: send one metrics record from a rank to the kernel's collector.

Records travel over a ZMQ PUSH socket to the collector's PULL socket in the kernel, in
batches (the wire format is ``dist_notebook.protocol``'s). Each message is signed with the
run's key (HMAC-SHA256) so the collector can drop anything that is not from this run.

The training thread does as little as possible: it checks the step, turns the values into
floats (a one-element tensor on a GPU is kept as it is and read by the sender, so report()
never waits for the GPU) and appends one ``protocol.Record`` to a deque (a few
microseconds). A sender thread wakes every ``BATCH_SECONDS``, turns the batch into the
protocol's rows (``Record.to_wire``), encodes them (binary columns,
``dist_notebook.columns``), signs it and hands it to ZMQ, so encoding, HMAC and ZMQ stay
off the training loop and the kernel is woken once per batch, not per step.

What is promised: every record report() takes reaches the kernel, or is counted as lost
and the run says so. The way is bounded at every step, so a rank that reports faster
than the kernel stores (a tight report() loop) is held back, never let run ahead and
lose what waits: ZMQ holds at most ``SNDHWM`` messages, and past ``MAX_QUEUED`` records
waiting on the rank report() waits for the sender (one length check a call otherwise).
Only when the kernel has taken nothing for ``STALL_S`` (it is gone, or stopped) does
report() stop waiting: it then gives records up, counted, until the kernel reads again.
The rank's last message (the end mark) says how many records it sent and gave up; the
kernel compares that with what it received and stored.
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
from . import datawait
from .stepmeasures import StepMeasures

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
# Messages ZMQ holds on the rank; the collector holds at most its RCVHWM per connection.
SNDHWM = 8
# Records waiting on the rank before report() waits for the sender: a rank that reports
# faster than the kernel stores is held back here (a few MB at most).
MAX_QUEUED = 50_000
# The kernel took nothing for this long although records wait: it is gone or stopped;
# report() then gives records up, counted, instead of holding training back for good.
STALL_S = 30.0


class _Channel:
    """Queues records in the caller's thread; a sender thread ships them in batches."""

    def __init__(self, endpoint: str, key: bytes, run_id: str, rank: int) -> None:
        import zmq

        self.run_id = run_id
        self.rank = rank
        self.key = key
        self.socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUSH)
        self.socket.setsockopt(zmq.SNDHWM, SNDHWM)
        # On close, what ZMQ still holds (at most SNDHWM messages) keeps being delivered.
        self.socket.setsockopt(zmq.LINGER, int(STALL_S * 1000))
        self.socket.connect(endpoint)
        self.last_time: float | None = None
        self.measures = StepMeasures()  # the step's CPU time, CPU wait, load, memory
        self.sent = 0  # records report() took (queued for the kernel)
        self.dropped = 0  # records given up: the kernel took nothing for STALL_S
        self.stalled = False
        self._progress = time.monotonic()  # when ZMQ last took a message
        self._held: list[bytes] | None = None  # a message ZMQ had no room for yet
        self._held_rows = 0  # and how many records it holds
        self._queue: deque[protocol.Record] = deque()
        self._room = threading.Condition()
        self._closing = threading.Event()
        self._sender = threading.Thread(target=self._run, name="dist-notebook-report", daemon=True)
        self._sender.start()

    def send(self, record: protocol.Record) -> None:
        if len(self._queue) >= MAX_QUEUED and not self._wait_for_room():
            self.dropped += 1
            return
        self._queue.append(record)  # deque.append is atomic: no lock on the training thread
        self.sent += 1

    def _wait_for_room(self) -> bool:
        """Hold the training thread until the sender made room; False if the kernel has
        stopped taking records (then the record is given up)."""
        with self._room:
            while len(self._queue) >= MAX_QUEUED:
                if self.stalled or self._closing.is_set():
                    return False
                self._room.wait(0.1)
        return True

    def _push(self, frames: list[bytes]) -> bool:
        """Hand *frames* to ZMQ, waiting while it has no room; False once ZMQ took
        nothing for STALL_S (kept in _held, tried again on the next call)."""
        import zmq

        while True:
            try:
                self.socket.send_multipart(frames, flags=zmq.NOBLOCK, copy=True)
            except zmq.Again:
                if time.monotonic() - self._progress > STALL_S:
                    self._set_stalled(True)
                    self._held = frames
                    return False
                self.socket.poll(100, zmq.POLLOUT)
                continue
            self._progress = time.monotonic()
            self._held = None
            if self.stalled:
                self._set_stalled(False)
            return True

    def _set_stalled(self, stalled: bool) -> None:
        with self._room:
            self.stalled = stalled
            self._room.notify_all()

    def _frames(self, payload: bytes) -> list[bytes]:
        return [hmac.digest(self.key, payload, "sha256"), payload]

    def _ship(self) -> bool:
        """Send everything queued; False if the kernel stopped taking it (STALL_S)."""
        while True:
            if self._held is not None:
                if not self._push(self._held):
                    return False
                self._held_rows = 0
            rows: list[list[Any]] = []
            while self._queue and len(rows) < MAX_BATCH:
                rows.append(_floats(self._queue.popleft()).to_wire())
            if not rows:
                return True
            with self._room:
                self._room.notify_all()
            self._held_rows = len(rows)
            if not self._push(self._frames(_payload(self.run_id, self.rank, rows))):
                return False
            self._held_rows = 0

    def _run(self) -> None:
        while not self._closing.wait(BATCH_SECONDS):
            self._ship()
        if self._ship():
            # The end mark: how many records this rank took and gave up, so the kernel
            # can tell what it received from what was sent.
            end = protocol.wire_message(self.run_id, self.rank, [], end=True)
            end["sent"], end["dropped"] = self.sent, self.dropped
            self._push(self._frames(json.dumps(end).encode()))
        else:  # the kernel is gone: what waits is given up, counted
            lost = len(self._queue) + self._held_rows
            self.dropped += lost
            self.sent -= lost
            self._queue.clear()

    def close(self) -> None:
        self._closing.set()
        with self._room:
            self._room.notify_all()
        self._sender.join()
        self.socket.close()
        self.measures.close()


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


def step_hooks() -> tuple[Any, ...]:
    """The hooks each record's system fields come from now (a copy)."""
    return tuple(_step_hooks)


def report(step: int | None = None, samples: Any = None, **metrics: Any) -> None:
    """Report one training step of this rank; never a barrier, never waits on other ranks.

    It returns in microseconds; only while ``MAX_QUEUED`` records of this rank wait for a
    kernel that stores slower than the rank reports does it wait for the sender (so that
    no record is lost), and never longer than ``STALL_S`` without the kernel taking any.

    ``step``: the step number (an int). ``samples``: samples processed since the last
    report (gives samples/s). ``data_time``: seconds this step waited for its data, if
    you time it yourself; without it, the time the step spent in DataLoader iterators'
    ``next()`` (engine/datawait.py), None for a loop without a DataLoader.
    Every other keyword is a metric of yours, under any name (``loss``, ``lr``, ``seq``,
    ``rank`` ...), a number or a one-element tensor. Each record also carries the step's
    CPU time, CPU wait, load, cores and peak memory (engine/stepmeasures.py).
    Outside a ``%%dist_train`` run, report() does nothing.
    """
    channel = _channel
    if channel is None:
        return
    now = time.time()
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int):
            step = int(protocol.to_float(step))
        if not -(2**63) <= step < 2**63:
            raise ValueError(
                f"report(step={step}): a step is stored as a 64-bit integer; report a step"
                " between -2**63 and 2**63 - 1 (the loop's counter)"
            )
    step_time = now - channel.last_time if channel.last_time is not None else None
    channel.last_time = now
    comm_time = gpu = None
    for hook in _step_hooks:
        extra = hook(now)
        comm_time = extra.get("comm_time", comm_time)
        gpu = extra.get("gpu", gpu)
    if comm_time is not None and step_time is not None and comm_time > step_time:
        comm_time = step_time  # a sampled estimate (commtime.py) never exceeds the step
    data = metrics.pop("data_time", None)
    waited = datawait.take()  # in DataLoader next() since the last report
    data_time = waited if data is None else protocol.to_float(data)
    values = {name: _value(value) for name, value in metrics.items()}
    count = None if samples is None else _value(samples)
    cpu_time, run_delay, load, cores, peak_mem = channel.measures.take()
    channel.send(
        protocol.Record(
            rank=channel.rank,
            step=step,
            time=now,
            step_time=step_time,
            comm_time=comm_time,
            samples=count,
            metrics=values,
            gpu=gpu,
            cpu_time=cpu_time,
            run_delay=run_delay,
            load=load,
            cores=cores,
            data_time=data_time,
            peak_mem=peak_mem,
        )
    )


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


def _payload(run_id: str, rank: int, rows: list[list[Any]], end: bool = False) -> bytes:
    """A batch as binary columns (``columns.py``: what the kernel reads fastest), or, for
    a batch that does not fit them (a step beyond 64 bits), as the protocol's JSON rows."""
    payload = columns.encode(run_id, rank, rows, end=end)
    if payload is None:
        # NaN and infinities travel as JSON's non-standard tokens between our own
        # processes; the kernel stores and serves them as valid JSON.
        message = protocol.wire_message(run_id, rank, rows, end=end)
        payload = json.dumps(message, separators=(",", ":")).encode()
    return payload


def _floats(record: protocol.Record) -> protocol.Record:
    """*record* with the tensors report() left for later read as floats (sender thread)."""
    metrics = record.metrics
    if any(not isinstance(v, float) for v in metrics.values()):
        record.metrics = {name: protocol.to_float(v) for name, v in metrics.items()}
    if record.samples is not None and not isinstance(record.samples, float):
        record.samples = protocol.to_float(record.samples)
    return record
