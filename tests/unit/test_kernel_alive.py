"""The orphan rule's view of a kernel: a killed kernel that its parent has not reaped
yet (a zombie) is gone, not alive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from dist_notebook.store.reader import kernel_alive


def test_a_zombie_kernel_counts_as_gone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = psutil.Process(proc.pid).create_time()
        assert kernel_alive(proc.pid, started)
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the killed process never became a zombie"
            time.sleep(0.01)
        assert not kernel_alive(proc.pid, started)  # not reaped (no wait yet), yet gone
    finally:
        proc.kill()
        proc.wait()
    assert not kernel_alive(proc.pid, started)
