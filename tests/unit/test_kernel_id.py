"""The live view's note names its kernel without touching ipykernel outside a kernel.

Importing ipykernel's app makes its comm manager the process's (comm's global hooks): in
a plain IPython shell that came to be after a live view's first note, and the next
live view's close raised ``KeyError`` from the comm manager at a run's end (a test of the
MPI launcher, after earlier runs in the same process)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
import comm
before = comm.get_comm_manager
from dist_notebook.display.dashboard import kernel_id
assert kernel_id() == ""
assert "ipykernel.kernelapp" not in sys.modules and "ipykernel.ipkernel" not in sys.modules
assert comm.get_comm_manager is before
print("OK")
"""


def test_kernel_id_outside_a_kernel_leaves_ipykernel_alone() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "OK", done.stdout + done.stderr
