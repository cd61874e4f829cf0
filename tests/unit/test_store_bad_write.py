"""A write the store cannot hold (an int beyond 64 bits) is one bad write, given up and
said, never the end of the store's retry thread: while another program holds the store,
the writes behind it wait, and once the store is free they are all written."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from dist_notebook.store import StoreReader, StoreWriter


def test_a_bad_write_waiting_behind_a_lock_does_not_stop_the_writes_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "runs.sqlite"
    writer = StoreWriter(path)
    writer.add_run("first", name="first", cluster_id="c", ranks=[0], steps=None, code="")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another program holds the store
    try:
        with caplog.at_level(logging.WARNING, logger="dist_notebook"):
            writer.add_run("bad", name="bad", cluster_id="c", ranks=[0], steps=2**70, code="")
            writer.add_run("after", name="after", cluster_id="c", ranks=[0], steps=5, code="")
            assert writer.pending() >= 2  # both wait behind the lock
    finally:
        other.execute("ROLLBACK")
        other.close()
    with caplog.at_level(logging.WARNING, logger="dist_notebook"):
        assert writer.flush(30) == 0, "the writes after a bad one never reached the store"
        writer.add_run("later", name="later", cluster_id="c", ranks=[0], steps=1, code="")
    writer.close()
    reader = StoreReader(path)
    assert reader.find_run("after") is not None
    assert reader.find_run("later") is not None
    assert reader.find_run("bad") is None
    assert any("given up" in r.getMessage() for r in caplog.records)
