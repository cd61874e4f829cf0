"""The run store: what the kernel writes reads back, also from another process mid-write."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from dist_notebook import protocol
from dist_notebook.protocol import Record
from dist_notebook.store import StoreError, StoreReader, StoreWriter
from dist_notebook.store.schema import ensure_schema


def _sql(path: Path, query: str) -> list[tuple[Any, ...]]:
    """*query*'s rows, read on a connection of the test's own (not the store's)."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


@pytest.fixture
def writer(tmp_path: Path) -> StoreWriter:
    w = StoreWriter(tmp_path / "runs.sqlite")
    yield w
    w.close()


def test_cluster_and_ranks_read_back(writer: StoreWriter) -> None:
    writer.add_cluster(
        "c1", n=2, backend="gloo", kernel_pid=os.getpid(), profile_dir="/p", ipp_cluster_id="x"
    )
    writer.set_ranks(
        "c1",
        [{"rank": r, "host": "h", "pid": 100 + r, "device": "cpu", "engine_id": r} for r in (0, 1)],
    )
    writer.set_cluster_state("c1", "ready")
    writer.set_rank_state("c1", 1, "busy")
    reader = StoreReader(writer.path)
    try:
        cluster = reader.cluster("c1")
        assert cluster is not None
        assert (cluster["state"], cluster["backend"], cluster["n"], cluster["kernel_pid"]) == (
            "ready",
            "gloo",
            2,
            os.getpid(),
        )
        assert [(r["rank"], r["pid"], r["state"]) for r in cluster["ranks"]] == [
            (0, 100, "idle"),
            (1, 101, "busy"),
        ]
        assert reader.cluster("nope") is None
        writer.set_cluster_state("c1", "stopped")
        stopped = reader.clusters()[0]
        assert stopped["state"] == "stopped" and stopped["stopped"] is not None
    finally:
        reader.close()


def test_ranks_carry_their_node(writer: StoreWriter) -> None:
    hosts = [("h1", 0), ("h1", 0), ("h2", 1)]
    writer.set_ranks(
        "c1",
        [{"rank": r, "host": h, "pid": r, "node_rank": node} for r, (h, node) in enumerate(hosts)],
    )
    reader = StoreReader(writer.path)
    try:
        assert [(r["host"], r["node_rank"]) for r in reader.ranks("c1")] == hosts
    finally:
        reader.close()


# The ranks table of schema version 2, before node_rank.
V2_RANKS = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '2');
CREATE TABLE ranks (
    cluster_id TEXT NOT NULL, rank INTEGER NOT NULL, host TEXT, pid INTEGER, device TEXT,
    state TEXT NOT NULL, engine_id INTEGER, PRIMARY KEY (cluster_id, rank)
);
INSERT INTO ranks VALUES ('old', 0, 'h1', 10, 'cpu', 'stopped', 0);
"""


def test_a_version_2_store_is_read_then_migrated(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "runs.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(V2_RANKS)
    conn.close()
    # A reader (the server) reads it as it is: no node for the old rank.
    reader = StoreReader(path)
    try:
        assert [(r["host"], r["node_rank"]) for r in reader.ranks("old")] == [("h1", None)]
    finally:
        reader.close()
    # A writer (a newer kernel) adds the column, keeps the old rows, records nodes.
    writer = StoreWriter(path)
    try:
        writer.set_ranks("new", [{"rank": 0, "host": "h2", "node_rank": 1}])
    finally:
        writer.close()
    conn = sqlite3.connect(path)
    try:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        rows = conn.execute("SELECT cluster_id, host, node_rank FROM ranks ORDER BY cluster_id")
        assert (version[0], rows.fetchall()) == ("4", [("new", "h2", 1), ("old", "h1", None)])
    finally:
        conn.close()


def test_run_and_metrics_read_back(writer: StoreWriter) -> None:
    writer.add_run("r1", name="demo", cluster_id="c1", ranks=[0, 1], steps=3, code="x = 1")
    writer.append_metrics(
        "r1",
        [
            Record(rank=r, step=s, time=1.0 + s, metrics={"loss": 0.5 / (s + 1)})
            for s in range(3)
            for r in (0, 1)
        ],
    )
    writer.set_run_rank("r1", 1, "failed", "boom")
    writer.set_run_state("r1", "failed", "rank 1 raised")
    reader = StoreReader(writer.path)
    try:
        run = reader.find_run("demo")
        assert run is not None and run["id"] == "r1"
        assert (run["state"], run["error"], run["code"]) == ("failed", "rank 1 raised", "x = 1")
        assert [(r["rank"], r["state"], r["error"]) for r in run["ranks"]] == [
            (0, "pending", None),
            (1, "failed", "boom"),
        ]
        records = reader.metrics("r1")
        assert len(records) == 6
        first = records[0]
        assert first["metrics"]["loss"] == 0.5 and first["rank"] == 0 and first["step"] == 0
        later = reader.metrics("r1", since=records[3]["seq"])
        assert [r["seq"] for r in later] == [r["seq"] for r in records[4:]]
    finally:
        reader.close()


def test_a_flush_of_interleaved_ranks_is_stored_rank_by_rank_in_order(
    writer: StoreWriter,
) -> None:
    """A flush holds many ranks' messages interleaved (10 records each); the writer
    inserts them rank by rank: every record is stored, each rank's in the order sent, its
    facts (count, first and last step, last finite loss) those of its records."""
    ranks = [3, 0, 2, 1]
    writer.add_run("r1", name="demo", cluster_id="c1", ranks=ranks, steps=None, code="")
    sent: dict[int, list[Record]] = {r: [] for r in ranks}
    for flush in range(2):
        batch = []
        for message in range(5):
            for r in ranks:
                for k in range(10):
                    step = (flush * 5 + message) * 10 + k
                    loss = float("nan") if (r == 2 and step == 99) else r + 1.0 / (step + 1)
                    rec = Record(rank=r, step=step, time=1.0 + step, metrics={"loss": loss})
                    batch.append(rec)
                    sent[r].append(rec)
        writer.append_metrics("r1", batch)
    reader = StoreReader(writer.path)
    try:
        rows = reader.record_rows("r1")
        assert len(rows) == 400
        seqs = [seq for seq, _ in rows]
        assert seqs == sorted(set(seqs))
        for r in ranks:
            mine = [rec for _, rec in rows if rec.rank == r]
            assert [(x.step, x.time) for x in mine] == [(x.step, x.time) for x in sent[r]]
        # Within one flush a rank's records are contiguous (inserted rank by rank).
        first_flush = [rec.rank for _, rec in rows[:200]]
        assert first_flush == sorted(first_flush)
        summary = reader.summary("r1")
        assert summary is not None
        by_rank = {s.rank: s for s in summary.ranks}
        for r in ranks:
            assert by_rank[r].records == 100
        facts = reader._facts("r1")
        assert facts[1][:4] == (100, 0, 99, 1.0 + 1.0 / 100)
        assert facts[2][:4] == (100, 0, 99, 2.0 + 1.0 / 99)  # its last loss is NaN
        for r in ranks:  # the seqs of its last WINDOW records, which the summary reads
            mine = [seq for seq, rec in rows if rec.rank == r]
            assert json.loads(facts[r][4]) == mine[-protocol.WINDOW :]
    finally:
        reader.close()


def _recent_by_scan(reader: StoreReader, run_id: str, rank: int) -> list[tuple[Any, ...]]:
    mine = [rec for _, rec in reader.record_rows(run_id) if rec.rank == rank]
    return [(r.step, r.time, r.metrics.get("loss")) for r in mine[-protocol.WINDOW :]]


def test_the_summary_reads_each_ranks_last_records_across_flushes_and_runs(
    writer: StoreWriter,
) -> None:
    """Flushes of a few records a rank (fewer than WINDOW), ranks missing from some
    flushes, another run's records written between them: each rank's last WINDOW records
    in the summary are exactly its last WINDOW stored, and no other rank's or run's."""
    ranks = list(range(6))
    for run in ("r1", "r2"):
        writer.add_run(run, name=run, cluster_id="c1", ranks=ranks, steps=None, code="")
    step = {(run, r): 0 for run in ("r1", "r2") for r in ranks}
    for flush in range(40):
        for run in ("r1", "r2"):
            batch = []
            for r in ranks:
                if (flush + r) % 3 == 0 and r != 0:  # this rank sent nothing this flush
                    continue
                for _ in range(1 + (flush * 7 + r) % 5 if r != 5 else 23):
                    s = step[run, r]
                    loss = 1000.0 * (run == "r2") + r + 1.0 / (s + 1)
                    batch.append(Record(rank=r, step=s, time=float(s), metrics={"loss": loss}))
                    step[run, r] = s + 1
            writer.append_metrics(run, batch)
    reader = StoreReader(writer.path)
    try:
        for run in ("r1", "r2"):
            summary = reader.summary(run)
            assert summary is not None
            for r in ranks:
                got = reader._recent_by_seq(run, r, reader._facts(run)[r][4])
                assert [(x.step, x.time, x.metrics.get("loss")) for x in got] == _recent_by_scan(
                    reader, run, r
                )
                assert len(got) == protocol.WINDOW
            by_rank = {x.rank: x for x in summary.ranks}
            assert [by_rank[r].records for r in ranks] == [step[run, r] for r in ranks]
    finally:
        reader.close()


def test_a_store_made_before_the_recent_seqs_keeps_its_summaries(tmp_path: Path) -> None:
    """A store of the previous layout (facts without "recent", the rank index): a writer
    of this version adds the column, the older run's summary is read by the index, the
    new run's by the seqs; a new store has no rank index (its cost on every record)."""
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    ensure_schema(conn)
    conn.executescript(
        "CREATE INDEX metrics_by_rank ON metrics (run_id, rank, seq);"
        "CREATE TABLE metrics_ranks (run_id TEXT NOT NULL, rank INTEGER NOT NULL,"
        " records INTEGER NOT NULL, first_step INTEGER, last_step INTEGER, last_loss REAL,"
        " PRIMARY KEY (run_id, rank));"
    )
    conn.execute(
        "INSERT INTO runs (id, name, cluster_id, state, started, steps, code)"
        " VALUES ('old', 'old', 'c1', 'done', 1.0, NULL, '')"
    )
    conn.execute("INSERT INTO run_ranks (run_id, rank, state) VALUES ('old', 0, 'done')")
    for s in range(50):
        conn.execute(
            "INSERT INTO metrics (run_id, rank, step, time, data) VALUES ('old', 0, ?, ?, ?)",
            (s, float(s), json.dumps({"loss": 1.0 / (s + 1)})),
        )
    conn.execute("INSERT INTO metrics_ranks VALUES ('old', 0, 50, 0, 49, 0.02)")
    conn.commit()
    conn.close()
    w = StoreWriter(path)
    try:
        w.add_cluster(
            "c1", n=1, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
        )
        w.add_run("new", name="new", cluster_id="c1", ranks=[0], steps=None, code="")
        w.append_metrics(
            "new", [Record(rank=0, step=s, time=float(s), metrics={"loss": 2.0}) for s in range(30)]
        )
        reader = StoreReader(path)
        try:
            for run, last in (("old", 49), ("new", 29)):
                summary = reader.summary(run)
                assert summary is not None, run
                assert summary.ranks[0].records == last + 1 and summary.ranks[0].last_step == last
                got = reader._recent(run, 0)
                assert [x.step for x in got] == list(range(last + 1 - protocol.WINDOW, last + 1))
            assert reader._facts("old")[0][4] is None and reader._facts("new")[0][4]
        finally:
            reader.close()
    finally:
        w.close()
    fresh = StoreWriter(tmp_path / "new.sqlite")
    try:
        fresh.add_cluster(
            "c1", n=1, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
        )
        names = {
            r[0] for r in _sql(fresh.path, "SELECT name FROM sqlite_master WHERE type = 'index'")
        }
        assert "metrics_by_rank" not in names and "metrics_by_run" in names, names
    finally:
        fresh.close()


def test_reader_without_a_store_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="start a cluster first, or set DIST_NOTEBOOK_STORE"):
        StoreReader(tmp_path / "absent.sqlite")


def test_file_that_is_not_a_store_names_the_fix(tmp_path: Path) -> None:
    bad = tmp_path / "runs.sqlite"
    bad.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StoreError, match="set DIST_NOTEBOOK_STORE to another file"):
        StoreWriter(bad)


def test_store_file_is_private(writer: StoreWriter) -> None:
    assert writer.path.stat().st_mode & 0o077 == 0


READER = textwrap.dedent(
    """
    import json, sys, time
    from dist_notebook.store import StoreReader
    reader = StoreReader(__import__("pathlib").Path(sys.argv[1]))
    total = int(sys.argv[2])
    print("ready", flush=True)
    seen, deadline = [], time.monotonic() + 30
    while time.monotonic() < deadline:
        n = len(reader.metrics("r1"))
        if not seen or n != seen[-1]:
            seen.append(n)
        if n >= total:
            break
        time.sleep(0.005)
    print(json.dumps(seen), flush=True)
    """
)


@pytest.mark.timeout(60)
def test_another_process_reads_while_the_kernel_writes(writer: StoreWriter) -> None:
    writer.add_run("r1", name="live", cluster_id="c1", ranks=[0], steps=None, code="")
    batches, per_batch = 40, 5
    total = batches * per_batch
    proc = subprocess.Popen(
        [sys.executable, "-c", READER, str(writer.path), str(total)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        for b in range(batches):
            writer.append_metrics(
                "r1",
                [
                    Record(rank=0, step=b * per_batch + i, time=time.time())
                    for i in range(per_batch)
                ],
            )
            time.sleep(0.01)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    seen = json.loads(out)
    assert seen[-1] == total
    # The reader saw the store grow batch by batch, never a torn batch.
    assert len(seen) > 2
    assert all(n % per_batch == 0 for n in seen)
    assert seen == sorted(seen)


def test_clusters_of_a_dead_kernel_are_closed_with_their_runs(writer: StoreWriter) -> None:
    for cluster_id, pid in (("gone", 11), ("live", os.getpid())):
        writer.add_cluster(
            cluster_id, n=2, backend="gloo", kernel_pid=pid, profile_dir="p", ipp_cluster_id="i"
        )
        writer.set_cluster_state(cluster_id, "ready")
        writer.add_run(
            f"run-{cluster_id}",
            name=cluster_id,
            cluster_id=cluster_id,
            ranks=[0, 1],
            steps=None,
            code="",
        )
        writer.set_run_state(f"run-{cluster_id}", "running")
    assert writer.close_orphans(lambda pid: pid == os.getpid()) == 1
    reader = StoreReader(writer.path)
    assert reader.cluster("gone")["state"] == "orphaned"
    assert reader.run("run-gone")["state"] == "orphaned"
    assert "kernel (pid 11) exited" in reader.run("run-gone")["error"]
    assert reader.cluster("live")["state"] == "ready"
    assert reader.run("run-live")["state"] == "running"
    assert writer.close_orphans(lambda pid: pid == os.getpid()) == 0


def test_deletes_in_small_transactions_take_exactly_what_they_name(
    writer: StoreWriter, monkeypatch: Any
) -> None:
    """Chunks that end inside a run, between runs and on a run's last record delete the
    named runs whole (records, ranks, events, row) and nothing of the others."""
    from dist_notebook.store import deleting

    monkeypatch.setattr(deleting, "FIRST_ROWS", 7)
    monkeypatch.setattr(deleting, "MIN_ROWS", 7)
    monkeypatch.setattr(deleting, "MAX_ROWS", 7)
    monkeypatch.setattr(deleting, "GAP_S", 0.0)
    writer.add_cluster("c1", n=2, backend="gloo", kernel_pid=0, profile_dir="", ipp_cluster_id="")
    sizes = {"a": 7, "b": 0, "c": 13, "keep": 5, "d": 1}
    for run_id, n in sizes.items():
        writer.add_run(run_id, name=run_id, cluster_id="c1", ranks=[0, 1], steps=None, code="")
        writer.append_metrics(
            run_id, [Record(rank=0, step=s, time=0.0, metrics={"loss": 1.0}) for s in range(n)]
        )
        writer.add_event("output", "x", run_id=run_id, rank=0)
    assert writer.delete_runs(["a", "b", "c", "d", "missing"]) == 4
    reader = StoreReader(writer.path)
    try:
        assert [r["id"] for r in reader.runs()] == ["keep"]
        assert len(reader.records("keep")) == 5 and len(reader.events(run_id="keep")) == 1
        left = _sql(writer.path, "SELECT run_id, COUNT(*) FROM metrics GROUP BY run_id")
        assert left == [("keep", 5)]
        assert _sql(writer.path, "SELECT DISTINCT run_id FROM run_ranks") == [("keep",)]
        assert _sql(writer.path, "SELECT run_id FROM events") == [("keep",)]
    finally:
        reader.close()


def test_an_up_to_date_store_opens_without_waiting_for_a_lock(tmp_path: Path) -> None:
    """Opening writes nothing to a store of this version, so another program's lock
    does not hold a cluster's start (it waited 5 s, then turned recording off)."""
    import sqlite3

    from dist_notebook.store.control import ControlQueue

    path = tmp_path / "runs.sqlite"
    StoreWriter(path).close()
    ControlQueue(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        t0 = time.monotonic()
        writer = StoreWriter(path)
        queue = ControlQueue(path)
        assert time.monotonic() - t0 < 1.0
        assert writer.pending() == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    queue.close()
    writer.close()
