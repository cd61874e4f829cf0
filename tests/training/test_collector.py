"""The kernel's metrics collector and the rank-side report(), over real ZMQ sockets.

Both ends run in this process: ``report()`` is pointed at a Collector the way a run
points it on each rank, and forged messages come from a PUSH socket of the test's own.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import zmq

from dist_notebook import report
from dist_notebook.engine import reporter
from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import PROTOCOL_VERSION, Record
from dist_notebook.store import StoreReader, StoreWriter
from dist_notebook.training.collector import MAX_MESSAGE_BYTES, Collector

from .conftest import wait_for

RUN = "run-under-test"


class Item:
    """Stands in for a 0-d tensor: report() sends ``value.item()``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[Collector]:
    writer = StoreWriter(tmp_path / "runs.sqlite")
    writer.add_run(RUN, name="t", cluster_id="c", ranks=[0, 1], steps=None, code="")
    c = Collector(RUN, os.urandom(32), RunMetrics([0, 1]), writer)
    yield c
    c.close()
    reporter.close_channel()
    writer.close()


@pytest.fixture
def push(collector: Collector) -> Iterator[Any]:
    socket = zmq.Context.instance().socket(zmq.PUSH)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(collector.endpoint)
    yield socket
    socket.close()


def signed(key: bytes, message: Any) -> list[bytes]:
    payload = json.dumps(message).encode()
    return [hmac.new(key, payload, hashlib.sha256).digest(), payload]


def signed_payload(key: bytes, payload: bytes) -> list[bytes]:
    return [hmac.new(key, payload, hashlib.sha256).digest(), payload]


def message(rank: int, rows: list[list[Any]], end: bool = False, run: str = RUN) -> dict:
    return {"v": PROTOCOL_VERSION, "run": run, "rank": rank, "records": rows, "end": end}


def stored(collector: Collector) -> list[Record]:
    assert collector.writer is not None
    collector.close()  # flushes what is pending
    reader = StoreReader(collector.writer.path)
    try:
        return reader.records(RUN)
    finally:
        reader.close()


def test_report_outside_a_run_is_a_no_op_that_sends_nothing(collector: Collector) -> None:
    assert reporter._channel is None
    report(step=0, loss=1.0)
    report()
    # A channel opened afterwards starts from nothing: the calls above queued no record.
    reporter.open_channel(collector.endpoint, collector.key, RUN)
    assert reporter.close_channel() == 0
    assert collector.wait_for_ends({0}, timeout=5) == set()
    assert stored(collector) == [] and collector.received == 0


def test_report_sends_every_record_with_step_time_and_item_values(collector: Collector) -> None:
    reporter.open_channel(collector.endpoint, collector.key, RUN)
    for i in range(5):
        report(step=i, loss=Item(1.0 / (i + 1)), acc=np.float32(0.5), samples=8)
    assert reporter.close_channel() == 5
    assert collector.wait_for_ends({0}, timeout=5) == set()
    records = stored(collector)
    assert [r.step for r in records] == list(range(5))
    assert records[0].metrics["loss"] == 1.0 and records[4].metrics["loss"] == pytest.approx(0.2)
    assert all(r.metrics["acc"] == 0.5 and r.rank == 0 and r.samples == 8 for r in records)
    assert records[0].step_time is None and all(r.step_time >= 0 for r in records[1:])
    assert collector.received == 5 and collector.rejected == 0


@pytest.mark.parametrize("name", ["seq", "rank", "end", "time", "step_time", "comm_time", "run"])
def test_a_metric_may_have_any_name(collector: Collector, name: str) -> None:
    """Reserved-looking names are the user's metrics: they never file a record under
    another rank, end a rank's records, replace the timestamp or break paging."""
    reporter.open_channel(collector.endpoint, collector.key, RUN)
    for i in range(3):
        report(step=i, loss=1.0, **{name: 2048 + i})
    assert reporter.close_channel() == 3
    assert collector.wait_for_ends({0}, timeout=5) == set()
    records = stored(collector)
    assert [(r.rank, r.step, r.metrics[name]) for r in records] == [
        (0, i, 2048.0 + i) for i in range(3)
    ]
    assert all(abs(r.time - time.time()) < 60 for r in records)


def test_non_finite_values_are_kept_and_stored_as_valid_json(collector: Collector) -> None:
    reporter.open_channel(collector.endpoint, collector.key, RUN)
    report(step=0, loss=float("nan"), samples=float("inf"), grad=float("-inf"))
    reporter.close_channel()
    assert collector.wait_for_ends({0}, timeout=5) == set()
    (rec,) = stored(collector)
    assert math.isnan(rec.metrics["loss"]) and rec.samples == math.inf
    assert rec.metrics["grad"] == -math.inf
    reader = StoreReader(collector.writer.path)  # type: ignore[union-attr]
    (served,) = reader.metrics(RUN)
    reader.close()
    text = json.dumps(served, allow_nan=False)  # raises on NaN/Infinity tokens
    assert json.loads(text)["metrics"] == {"loss": "nan", "grad": "-inf"}
    assert json.loads(text)["samples"] == "inf"


def test_report_refuses_a_value_it_cannot_send(collector: Collector) -> None:
    reporter.open_channel(collector.endpoint, collector.key, RUN)
    with pytest.raises(TypeError, match="a metric must be a number or a one-element tensor"):
        report(step=0, loss=object())


GOOD_ROW = [7, 1.0, None, None, None, {"loss": 0.5}, None]


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda key: signed(os.urandom(32), message(1, [GOOD_ROW])), id="wrong-key"),
        pytest.param(lambda key: signed(key, message(1, [GOOD_ROW], run="x")), id="other-run"),
        pytest.param(lambda key: signed(key, message(1, [GOOD_ROW]))[1:], id="unsigned"),
        pytest.param(lambda key: [*signed(key, message(1, [GOOD_ROW])), b"x"], id="extra-frame"),
        pytest.param(
            lambda key: [hmac.new(key, b"{", hashlib.sha256).digest(), b"{"], id="not-json"
        ),
        pytest.param(lambda key: signed(key, 42), id="not-a-message"),
        pytest.param(
            lambda key: signed_payload(key, reporter._payload(RUN, 1, [GOOD_ROW], False)[:-8]),
            id="short-columns",
        ),
        pytest.param(
            lambda key: signed_payload(
                os.urandom(32), reporter._payload(RUN, 1, [GOOD_ROW], False)
            ),
            id="columns-wrong-key",
        ),
        pytest.param(lambda key: signed(key, {**message(1, [GOOD_ROW]), "v": 1}), id="old-wire"),
        pytest.param(lambda key: signed(key, message("1", [GOOD_ROW])), id="rank-not-int"),  # type: ignore[arg-type]
        pytest.param(lambda key: signed(key, message(1, [[7, 1.0]])), id="short-row"),
        pytest.param(
            lambda key: signed(key, message(1, [[7, "t", None, None, None, {}, None]])),
            id="bad-time",
        ),
    ],
)
def test_forged_messages_are_rejected_and_not_stored(
    collector: Collector, push: Any, forge: Any
) -> None:
    push.send_multipart(forge(collector.key))
    wait_for(lambda: collector.rejected == 1, 5, "the forged message to be rejected")
    # The collector is still listening, and only the genuine record is kept.
    push.send_multipart(signed(collector.key, message(1, [GOOD_ROW])))
    wait_for(lambda: collector.received == 1, 5, "the genuine record")
    assert [(r.rank, r.step, r.metrics["loss"]) for r in stored(collector)] == [(1, 7, 0.5)]
    assert collector.metrics.count == 1


def test_end_markers_are_awaited(collector: Collector, push: Any) -> None:
    assert collector.wait_for_ends({0, 1}, timeout=0.1) == {0, 1}
    push.send_multipart(signed(collector.key, message(1, [], end=True)))
    assert collector.wait_for_ends({0, 1}, timeout=2) == {0}
    assert collector.received == 0


FLOOD = """
import sys, zmq
s = zmq.Context.instance().socket(zmq.PUSH)
s.setsockopt(zmq.LINGER, 5000)
s.connect(sys.argv[1])
blob = b"x" * (50 << 20)
for _ in range(10):
    s.send_multipart([b"sig", blob])
s.close()
"""


def test_an_oversized_message_is_refused_before_it_is_buffered(collector: Collector) -> None:
    """Another local process sending ten 50 MB frames disconnects itself (ZMQ_MAXMSGSIZE):
    the kernel's memory stays flat, and the channel keeps serving genuine records."""
    proc = psutil.Process()
    before = proc.memory_info().rss
    subprocess.run([sys.executable, "-c", FLOOD, collector.endpoint], timeout=60, check=True)
    genuine = zmq.Context.instance().socket(zmq.PUSH)
    genuine.setsockopt(zmq.LINGER, 0)
    genuine.connect(collector.endpoint)
    try:
        genuine.send_multipart(signed(collector.key, message(0, [GOOD_ROW])))
        wait_for(lambda: collector.received == 1, 10, "the genuine record after the flood")
    finally:
        genuine.close()
    grew = proc.memory_info().rss - before
    assert grew < 2 * MAX_MESSAGE_BYTES, f"the kernel grew by {grew / 2**20:.0f} MiB"
    # Refused inside ZMQ: not one of the frames ever reached the collector's thread.
    assert collector.rejected == 0 and collector.received == 1


def test_a_burst_of_records_larger_than_the_buffers_loses_none(collector: Collector) -> None:
    """More records than the collector's per-connection buffer holds: ZMQ holds the rank
    back (never drops), so every record arrives."""
    reporter.open_channel(collector.endpoint, collector.key, RUN)
    n = 50_000
    for i in range(n):
        report(step=i, loss=float(i), samples=1)
    assert reporter.close_channel() == n
    assert collector.wait_for_ends({0}, timeout=60) == set()
    records = stored(collector)
    assert [r.step for r in records] == list(range(n))


def test_a_rank_of_an_older_install_is_read_beside_the_columns(
    collector: Collector, push: Any
) -> None:
    """A rank of an older install sends the protocol's JSON rows; this one's report()
    binary columns (dist_notebook/columns.py). The kernel reads both, checks both
    signatures, and stores the same records either way."""
    rows = [
        [0, 1.0, None, None, 8.0, {"loss": 2.0}, None],
        [1, 2.0, 1.0, 0.5, 8.0, {"loss": float("nan"), "acc": 0.5}, None],
        [2, 3.0, 1.0, None, None, {"loss": 1.5, "acc": 0.75}, None],
    ]
    push.send_multipart(signed(collector.key, message(0, rows, end=True)))  # older: JSON rows
    payload = reporter._payload(RUN, 1, rows, True)  # this install's
    assert payload[:1] == b"{" and b"\n" in payload
    push.send_multipart(signed_payload(collector.key, payload))
    push.send_multipart(signed_payload(b"k" * 32, reporter._payload(RUN, 1, rows[:1], True)))
    assert collector.wait_for_ends({0, 1}, timeout=10) == set()
    wait_for(lambda: collector.rejected == 1, 5, "the wrongly signed batch to be refused")
    records = stored(collector)
    fields = [
        (r.rank, (r.step, r.time, r.step_time, r.comm_time, r.samples, repr(r.metrics)))
        for r in records
    ]
    old, new = [f for rank, f in fields if rank == 0], [f for rank, f in fields if rank == 1]
    assert len(old) == 3 and old == new
    assert collector.received == 6
