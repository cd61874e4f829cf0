"""A full disk under the run store: writes wait and land once space is freed (never
dropped), and a store that cannot be created says so in one line with the fix.

The disk is a 1 MB tmpfs mounted in a mount namespace of the test's own (root, as in
CI), so nothing of the machine fills up.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .isolated import can_isolate

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not can_isolate(), reason="a small disk of its own needs root (CI)"),
]

SCRIPT = textwrap.dedent(
    """
    import logging, os, sys
    from pathlib import Path
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    from dist_notebook.protocol import Record
    from dist_notebook.store import StoreError, StoreReader, StoreWriter

    disk = Path(sys.argv[1])

    def fill(name):
        try:
            with open(disk / name, "wb") as f:
                while True:
                    f.write(b"\\0" * 4096)
                    f.flush()
        except OSError as e:
            print("FILLED", e.errno, flush=True)

    path = disk / "runs.sqlite"
    w = StoreWriter(path)
    w.add_cluster("c1", n=1, backend="gloo", kernel_pid=os.getpid(), profile_dir="",
                  ipp_cluster_id="")
    w.add_run("r1", name="full", cluster_id="c1", ranks=[0], steps=None, code="")
    fill("filler")
    w.set_run_state("r1", "running")
    for b in range(10):
        w.append_metrics("r1", [Record(rank=0, step=b * 100 + i, time=0.0,
                                       metrics={"loss": 1.0, "x" * 200: 2.0})
                                for i in range(100)])
    w.set_run_state("r1", "succeeded")
    print("PENDING", w.pending(), flush=True)
    os.remove(disk / "filler")
    print("LEFT", w.flush(20), flush=True)
    r = StoreReader(path)
    print("STORED", len(r.records("r1")), r.run("r1")["state"], flush=True)
    r.close()
    w.close()
    fill("filler2")
    try:
        StoreWriter(disk / "new" / "runs.sqlite")
        print("OPENED", flush=True)
    except StoreError as e:
        print("ERROR", e, flush=True)
    """
)


def test_full_disk_under_the_store(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "full.py"
    script.write_text(SCRIPT)
    mount = f"mount -t tmpfs -o size=1m tmpfs {disk}"
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{mount} && exec "$@"']
        + ["sh", sys.executable, str(script), str(disk)],
        capture_output=True,
        text=True,
        timeout=100,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, f"{out}\n{err}"
    assert "FILLED 28" in out  # ENOSPC: the disk was full
    pending = int(out.split("PENDING ")[1].split()[0])
    assert pending >= 1, out  # the writes waited while the disk was full ...
    assert "LEFT 0" in out and "STORED 1000 succeeded" in out, out  # ... and all landed
    warnings = [line for line in err.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, err  # told once, with the fix
    assert "disk is full: free space, or set DIST_NOTEBOOK_STORE" in warnings[0]
    # A store that cannot be created on the full disk: one line that names the fix.
    error = next(line for line in out.splitlines() if line.startswith("ERROR"))
    assert "is full" in error and "free space there, or set DIST_NOTEBOOK_STORE" in error
    assert "Traceback" not in err and "OSError" not in error, err
