"""The hang report: every rank's current Python stack, killing nothing.

Each engine arms faulthandler on SIGUSR1 at boot (``dist_notebook.engine.stacks``);
this module sends the signal to the rank's own pid (known from the cluster, never
found by scanning processes) and reads what the rank appended to its stack file. A
stopped process cannot run a signal handler: it is reported as stopped instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import TYPE_CHECKING

import psutil

from ...engine.stacks import stack_file

if TYPE_CHECKING:
    from ..kind import Cluster


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _stopped_text(pid: int) -> str:
    return f"process {pid} is stopped (SIGSTOP): it cannot run any code"


def _silent(cluster: Cluster, rank: int) -> str:
    pid = next(r.pid for r in cluster.ranks if r.rank == rank)
    try:
        if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
            return _stopped_text(pid)
    except psutil.NoSuchProcess:
        return f"process {pid} is gone"
    return "no answer to SIGUSR1 within the wait"


class StacksError(RuntimeError):
    """The stacks cannot be collected; the message says why."""


def collect_stacks(cluster: Cluster, wait: float = 1.0) -> dict[int, str]:
    """{rank: stack text (or why there is none)} for every rank of a local cluster."""
    directory = cluster.stack_dir
    refusal = cluster.spec.engines.stacks_refusal()
    if refusal is not None:
        # Remote ranks' pids are other hosts' (or other PID namespaces'): they get no
        # stack folder (DistCluster._make_stack_dir).
        raise StacksError(refusal)
    report: dict[int, str] = {}
    pending: dict[int, tuple[str, int]] = {}
    for info in cluster.ranks:
        path = stack_file(directory, str(info.rank))
        try:
            status = psutil.Process(info.pid).status()
        except psutil.NoSuchProcess:
            report[info.rank] = f"process {info.pid} is gone"
            continue
        if status == psutil.STATUS_STOPPED:
            report[info.rank] = _stopped_text(info.pid)
            continue
        pending[info.rank] = (path, _size(path))
        # A process that ended since the look above is reported as gone below.
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, signal.SIGUSR1)
    deadline = time.monotonic() + wait
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        for rank, (path, start) in list(pending.items()):
            if _size(path) > start:
                time.sleep(0.05)  # let the handler finish writing
                with open(path) as f:
                    f.seek(start)
                    report[rank] = f.read()
                del pending[rank]
    for rank in pending:
        # A process stopped after the first look (or while it was being stopped) queues
        # the signal without running the handler: say it is stopped, not silent.
        report[rank] = _silent(cluster, rank)
    return dict(sorted(report.items()))
