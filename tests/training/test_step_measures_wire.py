"""The step's measures (protocol.STEP_MEASURES) on their way: report() -> the binary columns
or the protocol's rows -> the run store -> ``run.records()``, None kept as None, a row of an
older rank (7 entries) read with none, and a store of schema 3 read and then migrated; and
what engine/stepmeasures.py measures on this process: a step's CPU time, its wait for a CPU
when a busy process shares its core, and a peak of memory in the step it happened in."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dist_notebook import columns, protocol
from dist_notebook.engine.stepmeasures import StepMeasures
from dist_notebook.protocol import STEP_MEASURES, Record, decode_message, wire_message
from dist_notebook.store.reader import StoreReader
from dist_notebook.store.writer import StoreWriter


def measured(i: int, data_time: float | None) -> Record:
    return Record(
        rank=1,
        step=i,
        time=100.0 + i,
        step_time=None if i == 0 else 0.02,
        comm_time=0.004,
        samples=32.0,
        metrics={"loss": 1.0 / (i + 1)},
        cpu_time=None if i == 0 else 0.015,
        run_delay=None if i == 0 else 0.002,
        load=3.5,
        cores=2.0,
        data_time=data_time,
        peak_mem=1.5e8 + i,
    )


RECORDS = [measured(i, 0.001 * i if i % 2 else None) for i in range(6)]


def test_columns_carry_the_measures_and_their_gaps() -> None:
    payload = columns.encode("r", 1, [r.to_wire() for r in RECORDS])
    assert payload is not None
    rank, back, end = columns.decode(payload, columns.is_columns(payload), "r")
    assert (rank, end, back) == (1, False, RECORDS)


def test_a_measure_no_record_has_is_left_out_of_the_columns() -> None:
    rows = [measured(i, None).to_wire() for i in range(3)]
    payload = columns.encode("r", 1, rows)
    assert payload is not None
    head = json.loads(payload[: columns.is_columns(payload)])
    assert "data_time" not in head["cols"] and "peak_mem" in head["cols"]


def test_an_older_ranks_rows_of_seven_have_no_measures() -> None:
    r = RECORDS[3]
    old = [r.step, r.time, r.step_time, r.comm_time, r.samples, r.metrics, r.gpu]
    payload = columns.encode("r", 1, [old])
    assert payload is not None
    (_, (back,), _) = columns.decode(payload, columns.is_columns(payload), "r")
    assert all(getattr(back, m) is None for m in STEP_MEASURES)
    _, (json_back,), _ = decode_message(wire_message("r", 1, [old]), "r")
    assert all(getattr(json_back, m) is None for m in STEP_MEASURES)
    assert json_back.comm_time == r.comm_time


def test_the_protocols_rows_carry_the_measures_with_null() -> None:
    msg = json.loads(json.dumps(wire_message("r", 1, [r.to_wire() for r in RECORDS])))
    assert decode_message(msg, "r")[1] == RECORDS
    served = RECORDS[0].to_json()
    assert served["cpu_time"] is None and served["peak_mem"] == 1.5e8


def test_the_store_keeps_the_measures(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    writer = StoreWriter(path)
    try:
        writer.add_run("r", name="name", cluster_id="c", ranks=[0, 1], steps=6, code="x = 1")
        writer.append_metrics("r", RECORDS)
        writer.flush()
    finally:
        writer.close()
    reader = StoreReader(path)
    try:
        assert reader.records("r") == RECORDS
    finally:
        reader.close()


def test_a_store_of_schema_3_is_read_without_measures_then_migrated(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    StoreWriter(path).close()
    conn = sqlite3.connect(path)
    for column in STEP_MEASURES:
        conn.execute(f"ALTER TABLE metrics DROP COLUMN {column}")
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.execute(
        "INSERT INTO metrics (run_id, rank, step, time, data, step_time, comm_time, samples)"
        " VALUES ('old', 0, 5, 10.0, '{\"loss\": 2.0}', 0.1, 0.01, 8)"
    )
    conn.commit()
    conn.close()
    reader = StoreReader(path)
    try:
        (old,) = reader.records("old")
    finally:
        reader.close()
    assert (old.step, old.comm_time, old.metrics) == (5, 0.01, {"loss": 2.0})
    assert all(getattr(old, m) is None for m in STEP_MEASURES)
    StoreWriter(path).close()  # a newer kernel migrates it
    conn = sqlite3.connect(path)
    names = {row[1] for row in conn.execute("PRAGMA table_info(metrics)")}
    conn.close()
    assert set(STEP_MEASURES) <= names


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_cpu_time_is_the_threads_own() -> None:
    measures = StepMeasures()
    try:
        assert measures.take()[:2] == (None, None), "the first report opens the first step"
        spin(0.05)
        cpu_time, run_delay, load, cores, _ = measures.take()
        time.sleep(0.05)  # wall time, no CPU
        idle = measures.take()[0]
    finally:
        measures.close()
    assert cpu_time is not None and 0.05 <= cpu_time < 0.2, cpu_time
    assert idle is not None and idle < 0.02, idle
    assert run_delay is not None and run_delay >= 0
    assert load is not None and load >= 0
    assert cores == len(os.sched_getaffinity(0))


def test_a_step_moved_to_another_thread_has_no_cpu_time() -> None:
    measures = StepMeasures()
    try:
        measures.take()
        got: list[object] = []
        worker = threading.Thread(target=lambda: got.append(measures.take()[:2]))
        worker.start()
        worker.join()
    finally:
        measures.close()
    assert got == [(None, None)]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_run_delay_is_the_wait_for_a_cpu_a_busy_neighbour_causes() -> None:
    core = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile 1: pass"]
    )
    measures = StepMeasures()
    try:
        os.sched_setaffinity(0, {core})
        time.sleep(0.2)  # the hog is pinned and running
        measures.take()
        spin(0.1)
        cpu_time, run_delay, _, cores, _ = measures.take()
    finally:
        os.sched_setaffinity(0, before)
        measures.close()
        hog.kill()
        hog.wait()
    assert cores == 1.0
    assert cpu_time is not None and run_delay is not None
    # Sharing one core with a busy process: about as long waiting as running.
    assert run_delay >= 0.5 * cpu_time, (cpu_time, run_delay)


@pytest.mark.parametrize("rusage", [True, False], ids=["getrusage", "status-file"])
def test_peak_memory_is_the_steps_own(rusage: bool) -> None:
    measures = StepMeasures()
    assert measures._rusage, "on Linux ru_maxrss is the process's own mark"
    measures._rusage = rusage
    try:
        measures.take()
        base = measures.take()[4]
        block = bytearray(200 * 2**20)
        block[::4096] = b"x" * len(block[::4096])  # touched: resident
        del block
        peak = measures.take()[4]
        after = measures.take()[4]
        since_start = measures.peak_since_start
    finally:
        measures.close()
    assert base is not None and peak is not None and after is not None
    assert peak >= base + 150 * 2**20, (base, peak)
    if not since_start:  # the mark is reset each report: the next step is back down
        assert after < peak - 150 * 2**20, (peak, after)


def test_report_takes_data_time_out_of_the_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    from dist_notebook.engine import reporter

    sent: list[Record] = []

    class Channel:
        rank = 1
        last_time = None
        measures = StepMeasures()

        def send(self, record: Record) -> None:
            sent.append(record)

    monkeypatch.setattr(reporter, "_channel", Channel())
    monkeypatch.setattr(reporter, "_step_hooks", [])
    reporter.report(step=1, loss=0.5, data_time=0.003)
    Channel.measures.close()
    (record,) = sent
    assert (record.rank, record.metrics, record.data_time) == (1, {"loss": 0.5}, 0.003)
    row = record.to_wire()  # the row the sender ships, the measures after gpu
    assert dict(zip(STEP_MEASURES, row[7:], strict=True))["data_time"] == 0.003
    with pytest.raises(TypeError, match="report its .item"):
        monkeypatch.setattr(reporter, "_channel", Channel())
        reporter.report(step=2, data_time="slow")
    assert protocol.STEP_MEASURES[-1] == "peak_mem"


def test_data_time_is_the_steps_wait_in_a_dataloaders_next() -> None:
    import torch
    from torch.utils.data import DataLoader, Dataset

    from dist_notebook.engine import datawait

    class Slow(Dataset[int]):
        def __len__(self) -> int:
            return 6

        def __getitem__(self, i: int) -> int:
            time.sleep(0.03 if i == 2 else 0.0)
            return i

    datawait.install()
    try:
        assert datawait.take() is None, "no batch taken yet"
        waits = []
        for batch in DataLoader(Slow(), batch_size=1):
            waits.append((int(torch.as_tensor(batch)[0]), datawait.take()))
        elsewhere: list[float | None] = []
        worker = threading.Thread(target=lambda: elsewhere.append(datawait.take()))
        worker.start()
        worker.join()
    finally:
        datawait.uninstall()
    assert [i for i, _ in waits] == list(range(6))
    got = {i: w for i, w in waits if w is not None}
    assert len(got) == 6, waits
    assert got[2] >= 0.03 and max(w for i, w in got.items() if i != 2) < 0.02, waits
    assert elsewhere == [None], "each thread its own wait"
    assert datawait._original is None


def test_the_sender_reads_deferred_tensors_before_the_record_goes_on_the_wire() -> None:
    """report() leaves a GPU tensor in the record (reading it would wait for the GPU); the
    sender thread reads it (reporter._floats) and ships Record.to_wire()'s row."""
    import torch

    from dist_notebook.engine import reporter

    deferred: Any = {"samples": torch.tensor(64), "metrics": {"loss": torch.tensor(0.25)}}
    held = Record(rank=0, step=3, time=1.0, **deferred)
    row = reporter._floats(held).to_wire()
    assert row[4] == 64.0 and row[5] == {"loss": 0.25}
    assert all(type(v) is float for v in (row[4], *row[5].values()))
    payload = columns.encode("r", 0, [row])
    assert payload is not None
    assert columns.decode(payload, columns.is_columns(payload), "r")[1][0].metrics == {"loss": 0.25}
