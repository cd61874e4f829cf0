"""Nothing of a stopped cluster may remain: its process tree and its files.

ipyparallel's controller forks 8 scheduler processes and an engine on another launcher
starts a nanny; a controller or engine that ends without its own clean-up leaves them running (each
controller set ~42 MB and 20 listening ports). ipyparallel also leaves its engine-set
file in the profile's log folder after a clean stop. The process tree is taken from
the pids we started (controller and engines), never by scanning the process list.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterable

import psutil


def process_tree(pids: Iterable[int]) -> list[psutil.Process]:
    """The processes *pids* and all their descendants, as they are now.

    psutil.Process objects remember their start time: a pid reused later by another
    process is never signalled in their name.
    """
    found: dict[int, psutil.Process] = {}
    for pid in pids:
        try:
            top = psutil.Process(pid)
            found[pid] = top
            for child in top.children(recursive=True):
                found[child.pid] = child
        except psutil.NoSuchProcess:
            continue
    return list(found.values())


def created_before(pids: Iterable[int], last: float) -> list[int]:
    """Those of *pids* whose process was created before *last* (epoch seconds): pids
    read back from a file, whose processes may have ended and their numbers gone to
    processes started since."""
    kept = []
    for pid in pids:
        try:
            created = psutil.Process(pid).create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
            continue
        if created <= last:
            kept.append(pid)
    return kept


def running(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of *procs* still running (a zombie counts as ended)."""
    left = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except psutil.NoSuchProcess:
            continue
    return left


def reap(procs: list[psutil.Process], grace: float = 0.3) -> list[int]:
    """Give *procs* *grace* seconds to end by themselves, then SIGKILL the rest.

    Returns the pids still running after that (none, unless the kernel lacks the
    permission to signal them).
    """
    _, alive = psutil.wait_procs(running(procs), timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    _, alive = psutil.wait_procs(running(alive), timeout=1.0)
    return [p.pid for p in running(alive)]


def cluster_files(profile_dir: str, ipp_cluster_id: str) -> list[str]:
    """Files of one ipyparallel cluster in its profile: connection files (they hold the
    cluster's key), the cluster file, the logs and the engine-set file."""
    if not profile_dir or not ipp_cluster_id:
        return []
    found = []
    for folder in ("security", "log"):
        pattern = os.path.join(glob.escape(os.path.join(profile_dir, folder)), "*")
        found += [p for p in glob.glob(pattern) if ipp_cluster_id in os.path.basename(p)]
    return sorted(found)


def remove_files(paths: Iterable[str]) -> None:
    for path in paths:
        # Removed already (by ipyparallel's own stop racing us) is the outcome we want.
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
