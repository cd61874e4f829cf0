"""reap.created_before: a pid read back from a file counts only if its process is as old
as the file says (a number given to a newer process is never signalled)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from dist_notebook.cluster import reap


def test_a_process_started_after_the_file_was_written_is_not_the_clusters() -> None:
    written = time.time()
    # psutil's create time counts from the boot time in whole seconds: up to 1 s off
    time.sleep(2.1)
    newer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert reap.created_before([os.getpid(), newer.pid], written) == [os.getpid()]
        assert reap.created_before([newer.pid], time.time() + 1) == [newer.pid]
    finally:
        newer.kill()
        newer.wait(10)
    assert reap.created_before([newer.pid], time.time() + 1) == []  # gone: not kept
