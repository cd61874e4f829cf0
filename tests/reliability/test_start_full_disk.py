"""A cluster started with a full disk under the run store is refused in one line that
names the fix (ipyparallel writes the cluster's profile files beside the store: that
was a raw OSError, Errno 28)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .isolated import can_isolate

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not can_isolate(), reason="a small disk of its own needs root (CI)"),
]

SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from IPython.testing.globalipapp import start_ipython

    disk = Path(sys.argv[1])
    os.environ["DIST_NOTEBOOK_STORE"] = str(disk / "runs.sqlite")
    ip = start_ipython()
    ip.run_line_magic("load_ext", "dist_notebook")
    try:
        with open(disk / "filler", "wb") as f:
            while True:
                f.write(b"\\0" * 4096)
                f.flush()
    except OSError as e:
        print("FILLED", e.errno, flush=True)
    try:
        ip.run_line_magic("dist_cluster", "start -n 1 --cpu")
        print("STARTED", flush=True)
    except Exception as e:
        print("REFUSED", type(e).__name__, e, flush=True)
    """
)


def test_a_start_on_a_full_disk_says_so(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "start.py"
    script.write_text(SCRIPT)
    mount = f"mount -t tmpfs -o size=256k tmpfs {disk}"
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{mount} && exec "$@"']
        + ["sh", sys.executable, str(script), str(disk)],
        capture_output=True,
        text=True,
        timeout=150,
    )
    out = proc.stdout
    assert "FILLED 28" in out, out + proc.stderr
    refused = [line for line in out.splitlines() if line.startswith("REFUSED")]
    assert refused, out + proc.stderr
    assert "UsageError" in refused[0] and "is full" in refused[0], refused
    assert "free space there, or set DIST_NOTEBOOK_STORE" in refused[0]
    assert "Traceback" not in out
