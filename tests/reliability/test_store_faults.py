"""A locked or corrupt run store gives a clear StoreError and never stops training."""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from dist_notebook.cluster import ClusterSpec, DistCluster
from dist_notebook.protocol import Record
from dist_notebook.store import StoreError, StoreReader, StoreWriter

pytestmark = pytest.mark.timeout(120)

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


def test_locked_store_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    writer = StoreWriter(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="cannot write the run store .*locked"):
            writer.append_metrics("r", [Record(rank=0, step=0, time=0.0, metrics={"loss": 1.0})])
        assert time.monotonic() - t0 < 10
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    writer.append_metrics(
        "r", [Record(rank=0, step=0, time=0.0, metrics={"loss": 1.0})]
    )  # works again


@pytest.mark.slow
def test_training_goes_on_with_a_locked_store(
    shell: Any, cluster2: Any, throwaway_store: str, caplog: Any
) -> None:
    holder = sqlite3.connect(throwaway_store, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="dist_notebook"):
            result = shell.run_cell(SHORT_RUN)
        took = time.monotonic() - t0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.error_in_exec is None, result.error_in_exec
    last = shell.magics_manager.registry["TrainMagics"].last_result
    assert last.name == "locked-store"
    assert last.state.value == "succeeded" and last.records == 10
    assert "cannot write the run store" in caplog.text
    # The first write waits out the lock (5 s), later ones give up after 0.1 s (was 5 s
    # each: 45 s for this run).
    assert took < 20, f"a 5-step run with the store locked took {took:.1f} s"
