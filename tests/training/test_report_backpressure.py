"""report()'s channel is bounded and says what it lost: over real ZMQ sockets in this
process. A kernel that cannot keep up holds the rank back (nothing lost); a kernel that
takes nothing for STALL_S gets the records given up, counted in the end mark, and the
collector's losses() and the run's note name the rank and the count."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from dist_notebook import report
from dist_notebook.engine import reporter
from dist_notebook.metrics import RunMetrics
from dist_notebook.store import StoreWriter
from dist_notebook.training.collector import Collector
from dist_notebook.training.run import lost_note

RUN = "run-under-test"


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reporter, "MAX_QUEUED", 500)
    monkeypatch.setattr(reporter, "MAX_BATCH", 100)
    monkeypatch.setattr(reporter, "STALL_S", 1.0)


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[Collector]:
    writer = StoreWriter(tmp_path / "runs.sqlite")
    writer.add_run(RUN, name="t", cluster_id="c", ranks=[0], steps=None, code="")
    c = Collector(RUN, os.urandom(32), RunMetrics([0]), writer)
    yield c
    c.close()
    reporter.close_channel()
    writer.close()


def test_a_rank_faster_than_the_kernel_is_held_back_and_loses_nothing(
    small: None, collector: Collector
) -> None:
    reporter.open_channel(collector.endpoint, collector.key, RUN)
    n = 100_000  # 200 times what may wait on the rank
    for step in range(n):
        report(step=step, loss=1.0)
        # The rank never holds more than MAX_QUEUED records (plus one batch in hand).
        assert len(reporter._channel._queue) <= reporter.MAX_QUEUED  # type: ignore[union-attr]
    assert reporter.close_channel() == n
    assert collector.wait_for_ends({0}) == set()
    assert collector.by_rank == {0: n}
    assert collector.losses([0]) == {}


def test_a_kernel_that_takes_nothing_gets_the_loss_counted(small: None, tmp_path: Path) -> None:
    # A kernel that is gone: nothing listens where the channel points; ZMQ's queue fills.
    ctx = zmq.Context.instance()
    gone = ctx.socket(zmq.PULL)
    gone.setsockopt(zmq.LINGER, 0)
    port = gone.bind_to_random_port("tcp://127.0.0.1")
    gone.close()
    key = os.urandom(32)
    reporter.open_channel(f"tcp://127.0.0.1:{port}", key, RUN)
    channel = reporter._channel
    assert channel is not None
    t0 = time.monotonic()
    n = 20_000
    for step in range(n):
        report(step=step, loss=1.0)
    took = time.monotonic() - t0
    # Held back at most about STALL_S, then records are given up instead of waiting.
    assert took < reporter.STALL_S + 5, took
    assert channel.stalled and channel.dropped > 0
    closer = threading.Thread(target=reporter.close_channel)
    closer.start()
    closer.join(reporter.STALL_S + 10)
    assert not closer.is_alive(), "closing a channel to a deaf kernel must not hang"
    assert channel.sent + channel.dropped == n
    held = reporter.MAX_QUEUED + (reporter.SNDHWM + 1) * reporter.MAX_BATCH
    assert channel.dropped >= n - held, (channel.dropped, channel.sent)


def test_losses_compare_the_end_marks_with_what_arrived(collector: Collector) -> None:
    reporter.open_channel(collector.endpoint, collector.key, RUN)
    for step in range(50):
        report(step=step, loss=1.0)
    reporter.close_channel()
    assert collector.wait_for_ends({0}) == set()
    assert collector.losses([0]) == {}
    collector.told[0] = (50, 7)  # as if the rank had given 7 up and 0 arrived short
    assert collector.losses([0]) == {0: 7}
    assert collector.losses([0, 1]) == {0: 7, 1: None}  # rank 1 never confirmed its end
    assert lost_note({0: 7, 1: None}, 3) == (
        "records lost: rank 0 lost 7 records; rank 1 never confirmed the last records;"
        " 3 records could not be stored"
    )
    assert lost_note({}, 0) == ""


def test_a_step_beyond_64_bits_is_refused_by_report(collector: Collector) -> None:
    reporter.open_channel(collector.endpoint, collector.key, RUN)
    with pytest.raises(ValueError, match=r"report\(step=\d+\): a step is stored as a 64-bit"):
        report(step=2**70, loss=1.0)
    report(step=2**63 - 1, loss=1.0)
    assert reporter.close_channel() == 1
