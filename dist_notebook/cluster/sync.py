"""``%dist_sync [DIR]``: a folder of this machine onto every remote host of the cluster.

Remote ranks import the user's modules from their host's disk: an edit here reaches them
only once copied there. The copy goes through ssh as the launcher's (its ssh config,
cluster/launchers.py), to the same absolute path on each host, one host at a time in
parallel: rsync when this machine and the host both have it (only what changed goes),
else tar over the ssh pipe (everything, each time). With ``%dist_autoreload on`` the next
cell on the ranks runs the new code.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .launchers import ssh_config_args

if TYPE_CHECKING:
    from .kind import Cluster

SYNC_TIMEOUT_S = 300.0  # one host's copy; a host that takes longer is named as failed
# Not copied: what a working directory holds that the ranks never import.
EXCLUDE = (".git", "__pycache__", ".ipynb_checkpoints", ".venv", "node_modules")


class SyncError(RuntimeError):
    """The folder could not be copied; the message names the host and the fix."""


@dataclass(frozen=True)
class Synced:
    hosts: tuple[str, ...]
    files: int
    size: int
    seconds: float
    tool: str


def remote_hosts(cluster: Cluster) -> list[str]:
    """The hosts the cluster's ranks run on, as its launcher reaches them (ssh/mpi)."""
    spec = cluster.spec
    return spec.engines.sync_hosts(spec)


def _files(folder: Path) -> tuple[int, int]:
    count = size = 0
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in EXCLUDE]
        for name in names:
            count += 1
            size += os.lstat(os.path.join(root, name)).st_size
    return count, size


def _ssh(host: str, command: str) -> list[str]:
    return ["ssh", *ssh_config_args(), "-o", "BatchMode=yes", host, command]


def _has_rsync(host: str) -> bool:
    if shutil.which("rsync") is None:
        return False
    probe = subprocess.run(
        _ssh(host, "command -v rsync"), capture_output=True, text=True, timeout=60
    )
    return probe.returncode == 0


def _copy_one(host: str, folder: Path) -> str:
    target = shlex.quote(str(folder))
    if _has_rsync(host):
        ssh = shlex.join(["ssh", *ssh_config_args(), "-o", "BatchMode=yes"])
        command = ["rsync", "-a", "--delete", "-e", ssh]
        command += [f"--exclude={name}" for name in EXCLUDE]
        command += [f"{folder}/", f"{host}:{folder}/"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=SYNC_TIMEOUT_S)
        tool = "rsync"
    else:
        excludes = [f"--exclude={name}" for name in EXCLUDE]
        tar = subprocess.Popen(
            ["tar", "-C", str(folder), *excludes, "-cf", "-", "."], stdout=subprocess.PIPE
        )
        done = subprocess.run(
            _ssh(host, f"mkdir -p {target} && tar -C {target} -xf -"),
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            timeout=SYNC_TIMEOUT_S,
        )
        tar.wait(timeout=SYNC_TIMEOUT_S)
        tool = "tar over ssh"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SyncError(f"copy to {host} failed ({tool}): {last}")
    return tool


def sync(cluster: Cluster, folder: str | None = None) -> Synced:
    """Copy *folder* (default: this process's working directory) to every remote host."""
    path = Path(folder or os.getcwd()).expanduser().resolve()
    if not path.is_dir():
        raise SyncError(f"{path} is not a folder: give the folder to copy, e.g. %dist_sync src")
    hosts = remote_hosts(cluster)
    if not hosts:
        raise SyncError(
            "nothing to sync: this cluster's ranks run on this machine and see its files"
        )
    files, size = _files(path)
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(hosts)) as pool:
        tools = list(pool.map(lambda host: _copy_one(host, path), hosts))
    return Synced(tuple(hosts), files, size, time.monotonic() - t0, ", ".join(sorted(set(tools))))
