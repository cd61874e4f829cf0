"""The kernel's metrics collector and the rank-side report(), over real ZMQ sockets.

Both ends run in this process: ``report()`` is pointed at a Collector the way a run
points it on each rank, and forged messages come from a PUSH socket of the test's own.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from dist_notebook import report
from dist_notebook.engine import reporter
from dist_notebook.metrics import RunMetrics
from dist_notebook.store import StoreReader, StoreWriter
from dist_notebook.training.collector import Collector

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


def signed(key: bytes, record: dict[str, Any]) -> list[bytes]:
    payload = json.dumps(record).encode()
    return [hmac.new(key, payload, hashlib.sha256).digest(), payload]


def stored(collector: Collector) -> list[dict[str, Any]]:
    assert collector.writer is not None
    collector.close()  # flushes what is pending
    reader = StoreReader(collector.writer.path)
    try:
        return reader.metrics(RUN)
    finally:
        reader.close()


def test_report_outside_a_run_does_nothing() -> None:
    assert reporter._channel is None
    assert report(step=0, loss=1.0) is None
    assert report() is None


def test_report_sends_every_record_with_step_time_and_item_values(collector: Collector) -> None:
    reporter.open_channel(collector.endpoint, collector.key, RUN)
    for i in range(5):
        report(step=i, loss=Item(1.0 / (i + 1)), acc=np.float32(0.5), samples=8)
    assert reporter.close_channel() == 5
    assert collector.wait_for_ends({0}, timeout=5) == set()
    records = stored(collector)
    assert [r["step"] for r in records] == list(range(5))
    assert records[0]["loss"] == 1.0 and records[4]["loss"] == pytest.approx(0.2)
    assert all(r["acc"] == 0.5 and r["rank"] == 0 for r in records)
    assert "step_time" not in records[0] and all(r["step_time"] >= 0 for r in records[1:])
    assert collector.received == 5 and collector.rejected == 0


def test_report_refuses_a_value_it_cannot_send(collector: Collector) -> None:
    reporter.open_channel(collector.endpoint, collector.key, RUN)
    with pytest.raises(TypeError, match="cannot send a value of type object"):
        report(step=0, loss=object())


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda key, rec: signed(os.urandom(32), rec), id="wrong-key"),
        pytest.param(lambda key, rec: signed(key, {**rec, "run": "another-run"}), id="other-run"),
        pytest.param(lambda key, rec: signed(key, rec)[1:], id="unsigned"),
        pytest.param(lambda key, rec: [*signed(key, rec), b"extra"], id="extra-frame"),
        pytest.param(
            lambda key, rec: [hmac.new(key, b"{", hashlib.sha256).digest(), b"{"], id="not-json"
        ),
        pytest.param(lambda key, rec: signed(key, 42), id="not-a-record"),
        pytest.param(
            lambda key, rec: signed(key, {"run": RUN, "step": 1, "time": 1.0}), id="no-rank"
        ),
    ],
)
def test_forged_messages_are_rejected_and_not_stored(
    collector: Collector, push: Any, forge: Any
) -> None:
    good = {"run": RUN, "rank": 1, "step": 7, "time": 1.0, "loss": 0.5}
    push.send_multipart(forge(collector.key, {**good, "loss": 99.0}))
    wait_for(lambda: collector.rejected == 1, 5, "the forged message to be rejected")
    # The collector is still listening, and only the genuine record is kept.
    push.send_multipart(signed(collector.key, good))
    wait_for(lambda: collector.received == 1, 5, "the genuine record")
    assert [(r["rank"], r["step"], r["loss"]) for r in stored(collector)] == [(1, 7, 0.5)]
    assert collector.metrics.count == 1


def test_end_markers_are_awaited(collector: Collector, push: Any) -> None:
    assert collector.wait_for_ends({0, 1}, timeout=0.1) == {0, 1}
    push.send_multipart(signed(collector.key, {"run": RUN, "rank": 1, "end": True, "time": 1.0}))
    assert collector.wait_for_ends({0, 1}, timeout=0.3) == {0}
    assert collector.received == 0
