"""Nothing stays in /dev/shm: a pull where one rank raises, a kernel killed in the middle
of a push, and the size check counts free memory, not only the tmpfs's size.

A file left there holds its memory until reboot (a 32 MB pull per failed cell, 800 MB for
a killed push), so every path removes them: the kernel after a failed or interrupted
pull, the cluster's stop for what its ranks wrote, and any kernel's next start for the
files of writers that are gone (engine/shm.py names each file after its writer).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from typing import Any

import psutil
import pytest

from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.cluster.onranks.execute import RankError
from dist_notebook.engine import shm

pytestmark = pytest.mark.timeout(120)


def test_pull_where_one_rank_raises_leaves_no_file(shell: Any, cluster2: Any) -> None:
    pids = [r.pid for r in cluster2.ranks]
    shell.run_cell_magic("dist", "", "big = torch.ones(8_000_000)  # 32 MB on every rank")
    # Rank 0 writes its 32 MB file; rank 1 raises.
    with pytest.raises(RankError, match="ZeroDivisionError"):
        shell.run_line_magic("dist_pull", "big if rank == 0 else 1 // 0 --all")
    assert shm.files_of(pids) == []
    # and a pull that works still works, and leaves nothing either
    assert float(shell.run_line_magic("dist_pull", "big.sum() --rank 0")) == 8_000_000
    assert shm.files_of(pids) == []


KILLED_IN_PUSH = textwrap.dedent(
    """
    import os, signal, torch
    from dist_notebook.engine import shm
    dumped = shm.dump({"x": torch.ones(4_000_000)})  # the push's file, written
    print(dumped.path, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # before any rank mapped it
    """
)


def test_next_start_removes_the_file_of_a_kernel_killed_in_a_push(throwaway_store: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_IN_PUSH], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    path = proc.stdout.strip()
    assert path.startswith(shm.SHM_DIR) and os.path.exists(path)
    assert os.stat(path).st_size >= 16_000_000
    cluster = DistCluster(ClusterSpec(n=1))
    try:
        cluster.start_sync()  # any kernel's next start
        assert not os.path.exists(path)
    finally:
        cluster.stop_sync()


def test_the_size_check_counts_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    nbytes = 256 << 20
    assert shm.available(nbytes)  # this machine has the room
    real = psutil.virtual_memory()
    tight = real._replace(available=nbytes)  # as a busy machine would have it
    monkeypatch.setattr(psutil, "virtual_memory", lambda: tight)
    assert not shm.available(nbytes)  # /dev/shm alone still says there is room
    assert os.statvfs(shm.SHM_DIR).f_bavail * os.statvfs(shm.SHM_DIR).f_frsize > 2 * nbytes
