"""Ingest at scale: many real senders into one kernel's collector and run store.

The senders are child processes, each with several ranks' ``reporter._Channel`` (the
class behind ``report()``: its sender thread, batching, encoding, HMAC and PUSH socket), so
the messages are the real wire format. The kernel side is the real Collector, RunMetrics
and StoreWriter on a throwaway store. Also: the fast decoding path agrees with the
protocol's, the store's per-rank facts agree with counting, and the live view's rate
stays bounded whatever the rank count.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dist_notebook import protocol
from dist_notebook.display.live import POINTS_PER_S, LiveFeed
from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import Record
from dist_notebook.store import StoreReader, StoreWriter
from dist_notebook.training.collector import DRAIN_RECORDS, Collector, decode

RUN = "ingest-under-test"
PROCS, RANKS_PER_PROC, RECORDS = 4, 8, 1500  # 32 senders, 48,000 records

# One child: RANKS_PER_PROC ranks, each a reporter channel sending RECORDS rows as
# report() queues them (protocol.Record: step, time, step time, comm time, samples, metrics).
SENDER = """
import sys, time
from dist_notebook.engine import reporter
from dist_notebook.protocol import Record
endpoint, key, run, first, count, n = sys.argv[1:7]
chans = [reporter._Channel(endpoint, bytes.fromhex(key), run, r)
         for r in range(int(first), int(first) + int(count))]
now = time.time()
for step in range(int(n)):
    for c in chans:
        c.send(Record(rank=c.rank, step=step, time=now + step * 1e-3, step_time=1e-3,
                      comm_time=2e-4, samples=32.0, metrics={"loss": 1.0 / (step + 1)}))
    if step % 500 == 0:
        time.sleep(0.01)  # as a training loop would: the sender threads get their turn
for c in chans:
    c.close()
"""


@pytest.fixture
def kernel(tmp_path: Path) -> Any:
    ranks = list(range(PROCS * RANKS_PER_PROC))
    writer = StoreWriter(tmp_path / "runs.sqlite")
    writer.add_cluster(
        "c", n=len(ranks), backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    writer.add_run(RUN, name="many", cluster_id="c", ranks=ranks, steps=None, code="")
    key = os.urandom(32)
    collector = Collector(RUN, key, RunMetrics(ranks), writer)
    yield collector, writer, key, ranks, tmp_path / "runs.sqlite"
    collector.close()
    writer.close()


def test_many_senders_lose_nothing_and_memory_stays_bounded(kernel: Any) -> None:
    collector, writer, key, ranks, store = kernel
    peak = [0]
    done = threading.Event()

    def watch() -> None:  # what waits in the kernel for the store, sampled
        while not done.is_set():
            peak[0] = max(peak[0], len(collector._pending))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    children = [
        subprocess.Popen(
            [sys.executable, "-c", SENDER, collector.endpoint, key.hex(), RUN]
            + [str(first), str(RANKS_PER_PROC), str(RECORDS)],
            env=env,
        )
        for first in range(0, len(ranks), RANKS_PER_PROC)
    ]
    try:
        missing = collector.wait_for_ends(set(ranks), timeout=90)
        for child in children:
            assert child.wait(timeout=30) == 0
    finally:
        done.set()
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(10)
    assert not missing, f"ranks {sorted(missing)} never sent their end"
    total = len(ranks) * RECORDS
    assert collector.received == total and collector.rejected == 0
    collector.close()  # the last flush
    assert writer.flush(30) == 0
    counts = dict(
        sqlite3.connect(store)
        .execute("SELECT rank, COUNT(*) FROM metrics WHERE run_id = ? GROUP BY rank", (RUN,))
        .fetchall()
    )
    assert counts == dict.fromkeys(ranks, RECORDS), "every record of every rank is stored"
    summary = StoreReader(store).summary(RUN)
    assert summary is not None
    assert [(r.records, r.last_step) for r in summary.ranks] == [(RECORDS, RECORDS - 1)] * len(
        ranks
    )
    assert summary.ranks[0].last_loss == pytest.approx(1.0 / RECORDS)
    # Bounded: a flood never piles up more than a few drains before the store takes them.
    assert peak[0] <= 3 * DRAIN_RECORDS, peak[0]
    assert collector.cpu > 0


def test_the_fast_decoding_agrees_with_the_protocol() -> None:
    rows: list[list[Any]] = [
        [0, 1.5, 0.1, None, 32.0, {"loss": 0.5}, None],
        [None, 2.5, None, None, None, {}, None],
    ]
    plain = {"v": protocol.PROTOCOL_VERSION, "run": RUN, "rank": 3, "records": rows, "end": True}
    assert decode(plain, RUN) == protocol.decode_message(plain, RUN)
    # What the fast path leaves to the protocol: ints, "inf" strings, a GPU sample.
    for odd in (
        [1, 2.5, 1, None, 32, {"loss": 2}, None],
        [1, 2.5, None, None, None, {"loss": "inf"}, None],
        [1, 2.5, None, None, None, {}, {"util": 0.5, "mem": 1.0}],
    ):
        msg = dict(plain, records=[rows[0], odd])
        assert decode(msg, RUN) == protocol.decode_message(msg, RUN)
    for bad in (dict(plain, run="other"), dict(plain, rank="3"), dict(plain, records=[[1]])):
        with pytest.raises(protocol.WireError):
            decode(bad, RUN)


def test_the_stored_facts_agree_with_counting(tmp_path: Path) -> None:
    writer = StoreWriter(tmp_path / "runs.sqlite")
    writer.add_cluster("c", n=3, backend="gloo", kernel_pid=1, profile_dir="", ipp_cluster_id="")
    writer.add_run(RUN, name="f", cluster_id="c", ranks=[0, 1, 2], steps=None, code="")
    for start in range(0, 90, 30):  # three flushes, ranks interleaved; rank 2 never reports
        batch = []
        for step in range(start, start + 30):
            loss = math.nan if step >= 80 else 1.0 / (step + 1)  # the last finite loss wins
            batch += [Record(r, step, float(step), 0.1, 0.02, 4.0, {"loss": loss}) for r in (0, 1)]
        batch.append(Record(1, None, 99.0, metrics={"lr": 0.1}))  # no step, no loss
        writer.append_metrics(RUN, batch)
    writer.close()
    with_facts = StoreReader(tmp_path / "runs.sqlite").summary(RUN)
    shutil.copy(tmp_path / "runs.sqlite", tmp_path / "old.sqlite")
    conn = sqlite3.connect(tmp_path / "old.sqlite")
    conn.execute("DROP TABLE metrics_ranks")  # a store no writer of this version opened
    conn.commit()
    conn.close()
    counted = StoreReader(tmp_path / "old.sqlite").summary(RUN)
    assert with_facts == counted
    assert with_facts is not None
    r0, r1, r2 = with_facts.ranks
    assert (r0.records, r1.records, r2.records) == (90, 93, 0)
    assert r0.last_step == 89 and r0.last_loss == pytest.approx(1.0 / 80)
    # Deleting the run takes its facts with it.
    writer = StoreWriter(tmp_path / "runs.sqlite")
    writer.delete_runs([RUN])
    left = writer._conn.execute("SELECT COUNT(*) FROM metrics_ranks").fetchone()[0]
    writer.close()
    assert left == 0


class _Counted:
    """The widget's comm, counted: what the feed would send, in JSON bytes."""

    def __init__(self) -> None:
        self.bytes = 0
        self.points = 0

    def send(self, message: dict[str, Any]) -> None:
        self.bytes += len(json.dumps(message))
        self.points += len(message["records"])


@pytest.mark.parametrize("ranks", [8, 64])
def test_the_live_view_rate_is_bounded_whatever_the_rank_count(ranks: int) -> None:
    metrics = RunMetrics(list(range(ranks)))
    comm = _Counted()
    feed = LiveFeed(comm, metrics, lambda: metrics.run_summary(RUN, "running", None), 0.05)  # type: ignore[arg-type]
    feed.start()
    t0 = time.monotonic()
    for tick in range(40):  # 2 s of 200 records/s a rank
        time.sleep(max(0.0, t0 + tick * 0.05 - time.monotonic()))
        now = time.time()
        metrics.add(
            [
                Record(r, tick * 10 + j, now, metrics={"loss": 1.0})
                for r in range(ranks)
                for j in range(10)
            ]
        )
    feed.stop()
    wall = time.monotonic() - t0
    # The budget (a second's burst, then POINTS_PER_S), and the last flush's leftovers.
    assert comm.points <= POINTS_PER_S * (1 + wall) + 2 * ranks, comm.points
    assert feed._waiting == {}, "the last flush sends what waited"
    assert metrics.count == ranks * 400
