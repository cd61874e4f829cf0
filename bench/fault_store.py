"""Run store faults of issue #23 for bench/faults.py: a store that another program holds
locked, or whose disk is full, never loses a write.

    python bench/faults.py --only issue23-store

Rows: a lock (a second connection's BEGIN EXCLUSIVE, held 8 s: longer than a write
waits) across a run's start, records and end, and across a cluster's start; a prune of
2 M records beside a run's writer; a full disk under the store (a 1 MB tmpfs in a mount
namespace, when run as root). "lost" counts records or state changes that never reached
the store; "usable" is when the store has everything (or the panel's request is
answered) after the lock ends.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

LOCK_S = 8.0
PRUNE_ROWS = 2_000_000


def _hold(store: str, seconds: float) -> threading.Thread:
    """A second program's exclusive lock on *store* for *seconds*, from now."""
    ready = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(store, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        ready.set()
        time.sleep(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    ready.wait(10)
    return thread


def store_rows(b: Any, store: str) -> None:
    """Every row of this module, on *b*'s current cluster (a ready 2-rank one)."""
    locked_run(b, store)
    locked_start(b, store)
    prune_beside_a_writer(b)
    full_disk(b)


def locked_run(b: Any, store: str) -> None:
    from dist_notebook.store import StoreReader

    holder = _hold(store, LOCK_S)
    t0 = time.perf_counter()
    b.cell(
        "%%dist_train --no-dashboard --name locked-23\n"
        "for s in range(300):\n    report(step=s, loss=1.0)\n"
    )
    took = time.perf_counter() - t0
    last = b.ip.magics_manager.registry["TrainMagics"].last_result
    holder.join(LOCK_S + 10)
    left = b.cluster.writer().flush(30)
    stored_s = time.perf_counter() - t0
    reader = StoreReader(Path(store))
    run = reader.run(last.run_id) or {}
    records = len(reader.records(last.run_id)) if run else 0
    reader.close()
    b.row(
        f"store locked {LOCK_S:.0f} s across a run's start, 600 records and end",
        None,
        stored_s,
        lost=f"{last.records - records} records, final state {run.get('state', 'missing')}",
        run_s=round(took, 2),
        waiting_after=left,
        note="usable = until the store has the whole run (from the cell's start)",
    )


def locked_start(b: Any, store: str) -> None:
    from dist_notebook.store import StoreReader
    from dist_notebook.store.control import ControlQueue

    saved = b.session.cluster
    b.session.cluster = None
    holder = _hold(store, LOCK_S)
    try:
        b.start()
        cluster = b.cluster
        holder.join(LOCK_S + 10)
        t0 = time.perf_counter()
        panel = ControlQueue(Path(store))
        seq = panel.request(cluster.id, "interrupt")
        while panel.answer(seq)["done"] is None and time.perf_counter() - t0 < 30:
            time.sleep(0.05)
        answered = panel.answer(seq)["done"] is not None
        usable = time.perf_counter() - t0
        panel.close()
        cluster.writer().flush(30)
        reader = StoreReader(Path(store))
        row = reader.cluster(cluster.id) or {}
        reader.close()
        b.row(
            f"store locked {LOCK_S:.0f} s across a cluster's start",
            None,
            usable if answered else None,
            lost=0 if row.get("state") == "ready" and answered else f"stored: {row.get('state')}",
            note="usable = the panel's Interrupt answered, after the lock ended",
        )
        b.magic("dist_cluster", "stop")
    finally:
        b.session.cluster = saved


def prune_beside_a_writer(b: Any) -> None:
    from dist_notebook.protocol import Record
    from dist_notebook.store import StoreWriter

    root = Path(tempfile.mkdtemp(prefix="dist-bench-prune-"))
    try:
        path = root / "runs.sqlite"
        old = StoreWriter(path)
        old.add_cluster("old", n=1, backend="gloo", kernel_pid=0, profile_dir="", ipp_cluster_id="")
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO runs (id, name, cluster_id, state, started) VALUES"
            " ('old', 'old', 'old', 'succeeded', 1.0)"
        )
        conn.execute(
            "WITH RECURSIVE n(s) AS (SELECT 0 UNION ALL SELECT s + 1 FROM n WHERE s + 1 < ?)"
            " INSERT INTO metrics (run_id, rank, step, time, data)"
            " SELECT 'old', 0, s, 0, '{\"loss\": 1.0}' FROM n",
            (PRUNE_ROWS,),
        )
        conn.execute("COMMIT")
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM metrics WHERE run_id = 'old'")
        one = time.perf_counter() - t0
        conn.execute("ROLLBACK")
        conn.close()
        live = StoreWriter(path)
        live.add_run("r", name="live", cluster_id="old", ranks=[0], steps=None, code="")
        waits: list[float] = []
        stop = threading.Event()

        def train() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                live.append_metrics("r", [Record(rank=0, step=0, time=0.0, metrics={})])
                waits.append(time.perf_counter() - t)
                time.sleep(0.02)

        thread = threading.Thread(target=train, daemon=True)
        thread.start()
        t0 = time.perf_counter()
        runs, _ = old.prune(before=2.0)
        took = time.perf_counter() - t0
        stop.set()
        thread.join(10)
        live.close()
        old.close()
        b.row(
            f"prune of {PRUNE_ROWS / 1e6:.0f} M records beside a run's writer",
            None,
            max(waits),
            lost=0 if runs == 1 and len(waits) > 0 else f"pruned {runs}",
            prune_s=round(took, 2),
            one_transaction_s=round(one, 2),
            writes=len(waits),
            note="usable = the writer's longest wait for the store during the prune",
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


FULL_DISK = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from dist_notebook.protocol import Record
    from dist_notebook.store import StoreError, StoreReader, StoreWriter
    disk = Path(sys.argv[1])
    def fill(name):
        try:
            with open(disk / name, "wb") as f:
                while True:
                    f.write(bytes(4096)); f.flush()
        except OSError:
            pass
    w = StoreWriter(disk / "runs.sqlite")
    w.add_cluster("c", n=1, backend="gloo", kernel_pid=0, profile_dir="", ipp_cluster_id="")
    w.add_run("r", name="full", cluster_id="c", ranks=[0], steps=None, code="")
    fill("filler")
    for b in range(10):
        w.append_metrics("r", [Record(rank=0, step=b * 100 + i, time=0.0,
                                      metrics={"x" * 200: 1.0}) for i in range(100)])
    w.set_run_state("r", "running"); w.set_run_state("r", "succeeded")
    t0 = time.monotonic()
    os.remove(disk / "filler")
    w.flush(30)
    r = StoreReader(disk / "runs.sqlite")
    print("ROW", time.monotonic() - t0, 1000 - len(r.records("r")), r.run("r")["state"])
    fill("filler2")
    try:
        StoreWriter(disk / "new" / "runs.sqlite")
    except StoreError as e:
        print("MESSAGE", e)
    """
)


def full_disk(b: Any) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        b.row("full disk under the store", None, None, note="needs root (a tmpfs of its own)")
        return
    root = Path(tempfile.mkdtemp(prefix="dist-bench-full-"))
    try:
        disk = root / "disk"
        disk.mkdir()
        script = root / "full.py"
        script.write_text(FULL_DISK)
        mount = f"mount -t tmpfs -o size=1m tmpfs {disk}"
        proc = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{mount} && exec "$@"']
            + ["sh", sys.executable, str(script), str(disk)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = proc.stdout
        row = next((line.split() for line in out.splitlines() if line.startswith("ROW")), None)
        message = next((line[8:] for line in out.splitlines() if line.startswith("MESSAGE")), "")
        b.row(
            "full disk under the store: 1,000 records and the run's end, then space freed",
            None,
            float(row[1]) if row else None,
            lost=f"{row[2]} records, final state {row[3]}"
            if row
            else f"failed: {proc.stderr[-200:]}",
            new_store_message=message[:160],
            note="usable = from freeing space until all is stored",
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
