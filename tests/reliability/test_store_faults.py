"""A locked or corrupt run store gives a clear StoreError and never stops training."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dist_notebook.cluster import ClusterSpec, DistCluster
from dist_notebook.protocol import Record
from dist_notebook.store import StoreError, StoreReader, StoreWriter

pytestmark = pytest.mark.timeout(120)


def _sql(path: Path, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run *statement* on a connection of the test's own (as another program would) and
    commit; its rows."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


SHORT_RUN = (
    "%%dist_train --name locked-store --no-dashboard\n"
    "for step in range(5):\n    report(step=step, loss=1.0)\n"
)


def test_corrupt_store_is_a_clear_error(tmp_path: Path, monkeypatch: Any, caplog: Any) -> None:
    path = tmp_path / "runs.sqlite"
    path.write_bytes(b"this is not a database\x00\xff" * 512)
    for open_it in (StoreWriter, StoreReader):
        with pytest.raises(StoreError, match="cannot be used .*move it away or set DIST_NOTEB"):
            open_it(path)
    # A cluster whose store is corrupt says so once and goes on without recording.
    monkeypatch.setenv("DIST_NOTEBOOK_STORE", str(path))
    with caplog.at_level(logging.WARNING, logger="dist_notebook"):
        assert DistCluster(ClusterSpec(n=1)).writer() is None
    assert "this cluster and its runs will not be recorded" in caplog.text


def test_store_damaged_while_open_is_not_blamed_on_a_lock(tmp_path: Path, caplog: Any) -> None:
    from dist_notebook.store.recorder import record

    path = tmp_path / "runs.sqlite"
    StoreWriter(path).close()
    with sqlite3.connect(path) as conn:
        page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:  # another program damages the runs table's page
        f.seek((page - 1) * size)
        f.write(b"\xff" * size)
    writer = StoreWriter(path)  # opens: the damage is where only a run's write looks
    with pytest.raises(StoreError) as caught:
        writer.add_run("r1", name="n", cluster_id="c1", ranks=[0], steps=None, code="")
    message = str(caught.value)
    assert "malformed" in message and "damaged: move it away" in message
    assert "locked" not in message and "disk is full" not in message
    # Each write of a cell fails the same way: the warning is given once, not per write.
    with caplog.at_level(logging.WARNING, logger="dist_notebook"):
        for _ in range(4):
            record(
                writer, "add_run", "r1", name="n", cluster_id="c1", ranks=[0], steps=None, code=""
            )
    assert len([r for r in caplog.records if "damaged" in r.getMessage()]) == 1


def test_writes_wait_out_a_lock_in_order(tmp_path: Path, caplog: Any) -> None:
    """A real second connection holds the store (BEGIN EXCLUSIVE) for longer than a
    write waits, across a run's start, its records and its end: every write returns
    (the first after SQLite's wait, the others at once), the user is told once, and once
    the lock ends everything is stored: the run, its 600 records, its final state."""
    path = tmp_path / "runs.sqlite"
    writer = StoreWriter(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    waits = []
    try:
        with caplog.at_level(logging.WARNING, logger="dist_notebook"):
            for call in (
                lambda: writer.add_cluster(
                    "c1",
                    n=2,
                    backend="gloo",
                    kernel_pid=os.getpid(),
                    profile_dir="",
                    ipp_cluster_id="",
                ),
                lambda: writer.add_run(
                    "r1", name="locked", cluster_id="c1", ranks=[0, 1], steps=300, code=""
                ),
                lambda: writer.set_run_state("r1", "running"),
                *[
                    (lambda s=s: writer.append_metrics("r1", _records(range(s, s + 30))))
                    for s in range(0, 300, 30)
                ],
                lambda: writer.set_run_state("r1", "succeeded"),
                lambda: writer.set_cluster_state("c1", "stopped"),
            ):
                t0 = time.monotonic()
                call()
                waits.append(time.monotonic() - t0)
        assert writer.pending() == len(waits)
        reader = StoreReader(path)
        assert reader.run("r1") is None  # nothing is in the store yet
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert waits[0] < 8, waits  # SQLite's wait (5 s), then the write waits in memory
    assert max(waits[1:]) < 0.5, waits  # later writes do not wait again
    told = [r for r in caplog.records if "run store" in r.getMessage()]
    assert len(told) == 1 and "locked" in told[0].getMessage(), [r.getMessage() for r in told]
    assert writer.flush(timeout=15) == 0
    run = reader.run("r1")
    assert run is not None and run["state"] == "succeeded" and run["ended"] is not None
    assert len(reader.records("r1")) == 600
    assert [r.step for r in reader.records("r1") if r.rank == 0] == list(range(300))
    assert reader.cluster("c1")["state"] == "stopped"
    reader.close()
    writer.close()


def _records(steps: Any) -> list[Record]:
    return [
        Record(rank=rank, step=step, time=float(step), metrics={"loss": 1.0})
        for step in steps
        for rank in (0, 1)
    ]


def test_a_writer_opened_on_a_locked_store_records_once_it_is_free(
    tmp_path: Path, caplog: Any
) -> None:
    """A lock when the writer opens (a cluster's start) no longer turns recording off
    for the writer's whole life: it opens, and writes once the lock ends."""
    path = tmp_path / "runs.sqlite"
    StoreWriter(path).close()
    with sqlite3.connect(path) as old:  # a store of an older version: opening it writes
        old.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    old.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with caplog.at_level(logging.WARNING, logger="dist_notebook"):
            t0 = time.monotonic()
            writer = StoreWriter(path)
            writer.add_cluster(
                "c1",
                n=1,
                backend="gloo",
                kernel_pid=os.getpid(),
                profile_dir="",
                ipp_cluster_id="",
            )
            writer.set_cluster_state("c1", "ready")
            took = time.monotonic() - t0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert took < 8
    assert len([r for r in caplog.records if "locked" in r.getMessage()]) == 1
    assert writer.flush(timeout=15) == 0
    reader = StoreReader(path)
    assert reader.cluster("c1")["state"] == "ready"
    reader.close()
    writer.close()


def test_records_beyond_the_memory_bound_are_given_up_oldest_first(
    tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    """Memory stays bounded while the store is locked: the oldest waiting records go
    (said once, and counted in an event of the run); the run's state changes and its
    newest records are stored once the lock ends."""
    from dist_notebook.store import backlog

    monkeypatch.setattr(backlog, "MAX_HELD_BYTES", 20_000)
    path = tmp_path / "runs.sqlite"
    writer = StoreWriter(path)
    writer.add_cluster(
        "c1", n=2, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with caplog.at_level(logging.WARNING, logger="dist_notebook"):
            writer.add_run("r1", name="big", cluster_id="c1", ranks=[0, 1], steps=None, code="")
            for start in range(0, 1000, 50):
                writer.append_metrics("r1", _records(range(start, start + 50)))
            writer.set_run_state("r1", "running")
            writer.set_run_state("r1", "succeeded")
            assert writer._backlog.held <= 20_000 * 9 // 8 + 50 * 2 * 200
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert writer.flush(timeout=15) == 0
    reader = StoreReader(path)
    assert reader.run("r1")["state"] == "succeeded"
    steps = [r.step for r in reader.records("r1") if r.rank == 0]
    assert steps and steps[-1] == 999 and steps == list(range(steps[0], 1000))
    dropped = [e for e in reader.events(run_id="r1") if e["kind"] == "store-records-dropped"]
    assert len(dropped) == 1 and dropped[0]["message"].startswith(f"{2 * steps[0]} records")
    given_up = [r for r in caplog.records if "given up" in r.getMessage()]
    assert len(given_up) == 1, [r.getMessage() for r in caplog.records]
    reader.close()
    writer.close()


def test_close_says_what_a_lock_kept_from_the_store(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    writer = StoreWriter(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        writer.add_event("note", "one")
        with pytest.raises(StoreError, match="1 writes to the run store .* were not written"):
            writer.close(timeout=0.5)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_run_left_running_by_an_ended_cluster_reads_orphaned(tmp_path: Path) -> None:
    """A run whose end never reached the store (as before writes waited) does not read
    ``running`` forever once its cluster has ended: it reads orphaned, can be deleted,
    and the next writer writes it so."""
    from dist_notebook.store import writer as writer_module

    path = tmp_path / "runs.sqlite"
    writer = StoreWriter(path)
    writer.add_cluster(
        "c1", n=1, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    writer.add_run("r1", name="stuck", cluster_id="c1", ranks=[0], steps=None, code="")
    writer.set_run_state("r1", "running")
    writer.set_cluster_state("c1", "stopped")
    reader = StoreReader(path)
    assert reader.run("r1")["state"] == "running"  # just stopped: its end may follow
    ended = time.time() - writer_module.ENDED_GRACE_S - 1
    _sql(path, "UPDATE clusters SET stopped = ? WHERE id = 'c1'", (ended,))
    run = reader.run("r1")
    assert run["state"] == "orphaned" and "never recorded" in run["error"]
    assert [r["state"] for r in reader.runs(state="orphaned")] == ["orphaned"]
    assert writer.close_orphans(lambda pid: True) == 0
    stored = sqlite3.connect(path).execute("SELECT state FROM runs").fetchall()
    assert stored == [("orphaned",)]
    assert writer.prune(time.time() + 1) == (1, 1)
    reader.close()
    writer.close()


def test_prune_never_holds_the_store_from_a_running_writer(tmp_path: Path) -> None:
    """Prune of many records goes in small transactions: a training's writer beside it
    (its own connection, a write every 20 ms) never waits more than a third of what one
    transaction would hold the store for (here 1-2 s; ~0.1 s measured)."""
    path = tmp_path / "runs.sqlite"
    writer = StoreWriter(path)
    writer.add_cluster(
        "old", n=1, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    writer.set_cluster_state("old", "stopped")
    _sql(path, "UPDATE clusters SET started = 1.0, stopped = 1.0 WHERE id = 'old'")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for i in range(4):
        conn.execute(
            "INSERT INTO runs (id, name, cluster_id, state, started) VALUES (?, ?, 'old',"
            " 'succeeded', 1.0)",
            (f"old{i}", f"old{i}"),
        )
        conn.execute(
            "WITH RECURSIVE n(s) AS (SELECT 0 UNION ALL SELECT s + 1 FROM n WHERE s + 1 < ?)"
            " INSERT INTO metrics (run_id, rank, step, time, data)"
            " SELECT ?, 0, s, 0, '{\"loss\": 1.0}' FROM n",
            (ROWS_PER_RUN, f"old{i}"),
        )
    conn.execute("COMMIT")
    # What one transaction would hold the store for: more than the writer may wait.
    t0 = time.monotonic()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("DELETE FROM metrics WHERE run_id = 'old0'")
    one = (time.monotonic() - t0) * 4
    conn.execute("ROLLBACK")
    conn.close()

    live = StoreWriter(path)
    live.add_cluster(
        "now", n=1, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    live.add_run("r", name="live", cluster_id="now", ranks=[0], steps=None, code="")
    waits: list[float] = []
    stop = threading.Event()

    def train() -> None:
        step = 0
        while not stop.is_set():
            t = time.monotonic()
            live.append_metrics("r", [Record(rank=0, step=step, time=0.0, metrics={})])
            waits.append(time.monotonic() - t)
            step += 1
            time.sleep(0.02)

    thread = threading.Thread(target=train, daemon=True)
    thread.start()
    try:
        t0 = time.monotonic()
        assert writer.prune(before=2.0) == (4, 1)
        took = time.monotonic() - t0
    finally:
        stop.set()
        thread.join(timeout=10)
    assert live.pending() == 0  # nothing had to wait in memory
    reader = StoreReader(path)
    assert reader.runs() and [r["id"] for r in reader.runs()] == ["r"]
    assert len(reader.records("r")) == len(waits)
    assert _sql(path, "SELECT COUNT(*) FROM metrics WHERE run_id != 'r'") == [(0,)]
    reader.close()
    print(
        f"prune {took:.2f} s, one transaction {one:.2f} s, writes {len(waits)}, max wait"
        f" {max(waits):.3f} s"
    )
    # Relative to the one transaction's hold, so that a loaded (or a faster) machine,
    # which stretches (or shrinks) both, reads the same.
    assert one > 0.6, f"the store is too small to show a long hold ({one:.2f} s)"
    assert max(waits) < one / 3, (
        f"a write waited {max(waits):.2f} s during a prune of {took:.1f} s (one"
        f" transaction: {one:.1f} s)"
    )
    live.close()
    writer.close()


ROWS_PER_RUN = 600_000


def test_the_panel_reaches_the_kernel_after_a_lock(tmp_path: Path, caplog: Any) -> None:
    """The owning kernel's side of the control queue outlives a lock: opened while the
    store is locked, take() finds nothing (said once) instead of failing, an answer
    made while locked is written after, and requests made after the lock are taken."""
    from dist_notebook.store import control
    from dist_notebook.store.control import ControlQueue

    path = tmp_path / "runs.sqlite"
    StoreWriter(path).close()
    server = ControlQueue(path)  # the table exists; a request waits for the kernel
    first = server.request("c1", "interrupt")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with caplog.at_level(logging.WARNING, logger="dist_notebook"):
            kernel = ControlQueue(path)
            polls = []
            t_lock = time.monotonic()
            while time.monotonic() - t_lock < control.TELL_AFTER_S + 1:  # a watcher's polls
                t0 = time.monotonic()
                assert kernel.take("c1") == []
                polls.append(time.monotonic() - t0)
                time.sleep(0.2)
            kernel.finish(first, "nothing")  # an answer made while locked is kept
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert max(polls) < 1, polls
    assert len([r for r in caplog.records if "locked" in r.getMessage()]) == 1
    assert kernel.take("c1") == [(first, "interrupt")]  # taken and answered at once
    assert server.answer(first)["result"] == "nothing"
    second = server.request("c1", "stop")
    assert kernel.take("c1") == [(second, "stop")]
    kernel.finish(second, "stopped")
    assert server.answer(second)["result"] == "stopped"
    kernel.close()
    server.close()


class Holder:
    """A second program's connection that holds the store (BEGIN EXCLUSIVE) until
    released, at the latest after *limit* seconds."""

    def __init__(self, path: str, limit: float = 60) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN EXCLUSIVE")
        self.t0 = time.monotonic()
        self._timer = threading.Timer(limit, self.release)
        self._timer.start()
        self._lock = threading.Lock()
        self.held: float | None = None

    def release(self) -> float:
        with self._lock:
            self._timer.cancel()
            if self.held is None:
                self.conn.execute("ROLLBACK")
                self.conn.close()
                self.held = time.monotonic() - self.t0
            return self.held


def store_messages(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if "run store" in r.getMessage()]


@pytest.mark.slow
def test_a_run_under_a_lock_is_stored_whole(
    shell: Any, cluster2: Any, throwaway_store: str, caplog: Any
) -> None:
    """A lock held across a run's start, its records and its end (longer than a write
    waits for it): training goes on, the user is told once, and once the lock ends the
    store has the run, every record and the final state (it lost the run's row, or its
    end and last records, before)."""
    holder = Holder(throwaway_store)
    try:
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="dist_notebook"):
            result = shell.run_cell(SHORT_RUN)
        took = time.monotonic() - t0
        assert cluster2.writer().pending() > 0  # the run's writes wait for the lock
        time.sleep(0.5)
    finally:
        held = holder.release()
    assert result.error_in_exec is None, result.error_in_exec
    last = shell.magics_manager.registry["TrainMagics"].last_result
    assert last.name == "locked-store"
    assert last.state.value == "succeeded" and last.records == 10
    # The first write waits out SQLite's 5 s, the others wait in memory (0.1 s each
    # before: 45 s for this run).
    assert took < 20, f"a 5-step run with the store locked took {took:.1f} s"
    assert held > 5.5
    written = store_messages(caplog)
    assert len([m for m in written if "does not take writes now" in m]) == 1, written
    assert cluster2.writer().flush(timeout=20) == 0
    reader = StoreReader(Path(throwaway_store))
    try:
        run = reader.run(last.run_id)
        assert run is not None and run["state"] == "succeeded", run
        assert [r["state"] for r in run["ranks"]] == ["done", "done"]
        assert len(reader.records(last.run_id)) == 10
    finally:
        reader.close()


@pytest.mark.slow
def test_a_cluster_started_under_a_lock_records_and_takes_the_panel(
    shell: Any, throwaway_store: str, caplog: Any
) -> None:
    """A lock at cluster start turned recording and the panel's Stop/Interrupt off for
    the cluster's whole life; now both work once the lock ends."""
    from dist_notebook.store.control import ControlQueue

    from .conftest import kill_all, pids_of, session_of, wait_gone

    session = session_of(shell)
    saved = session.cluster
    session.cluster = None
    holder = Holder(throwaway_store)
    cluster = None
    try:
        with caplog.at_level(logging.WARNING, logger="dist_notebook"):
            shell.run_line_magic("dist_cluster", "start -n 2 --cpu")
            cluster = session.cluster
            assert cluster is not None and cluster.state.value == "ready"
            time.sleep(max(0.0, 6.0 - (time.monotonic() - holder.t0)))  # past the watcher's 5 s
            held = holder.release()
        assert held >= 6.0
        assert cluster.writer() is not None and cluster.writer().flush(timeout=20) == 0
        reader = StoreReader(Path(throwaway_store))
        try:
            row = reader.cluster(cluster.id)
            assert row is not None and row["state"] == "ready", row
            assert [r["rank"] for r in row["ranks"]] == [0, 1]
        finally:
            reader.close()
        told = store_messages(caplog)
        assert len([m for m in told if "does not take writes now" in m]) == 1, told
        assert len([m for m in told if "panel" in m]) <= 1, told
        assert not [m for m in told if "will not" in m], told
        # The panel's Interrupt reaches the kernel's watcher, which outlived the lock.
        panel = ControlQueue(Path(throwaway_store))
        try:
            seq = panel.request(cluster.id, "interrupt")
            deadline = time.monotonic() + 15
            while panel.answer(seq)["done"] is None and time.monotonic() < deadline:
                time.sleep(0.1)
            answer = panel.answer(seq)
        finally:
            panel.close()
        assert answer["done"] is not None and answer["error"] is None, answer
    finally:
        holder.release()
        session.cluster = saved
        if cluster is not None:
            pids = pids_of(cluster) if cluster.engines.controller_pid is not None else []
            cluster.stop_sync()
            left, _ = wait_gone(pids, 10)
            kill_all(left)
