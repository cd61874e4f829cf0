"""Fixtures for the reliability tests (issue #4): faults, exits, ports, bad input, security.

- ``own_cluster``: a 2-rank CPU cluster of this module only, started with the magic
  (``--auto-restart``) in place of the shared one, which is put back afterwards. Tests
  that kill, stop or restart engines use it, never ``cluster2``.
- ``Kernel``: a real IPython kernel in its own process (jupyter_client's
  KernelManager), for what only a separate kernel process can show: its shutdown, its
  SIGKILL, two kernels with a cluster each.
- ``pids_of`` / ``wait_gone``: our processes, from the cluster object (never by
  scanning the process list).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

# One collective that every rank must join; prints the sum of (rank + 1).
ALL_REDUCE = "t = torch.ones(1) * (rank + 1)\ndist.all_reduce(t)\nprint(int(t.item()))"


def session_of(shell: Any) -> Any:
    from dist_notebook.magics.session import Session

    return Session.for_shell(shell)


def alive(pid: int) -> bool:
    """True while *pid* runs (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], timeout: float) -> tuple[list[int], float]:
    """Wait up to *timeout* s for every pid to end; (those still alive, seconds waited)."""
    t0 = time.monotonic()
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() - t0 > timeout:
            return left, time.monotonic() - t0
        time.sleep(0.02)


def kill_all(pids: list[int]) -> None:
    """Clean-up after a failed test: end processes this test started (by pid)."""
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass


def pids_of(cluster: Any) -> list[int]:
    """Engine pids (from the ranks) and the controller's pid (from its launcher)."""
    return [r.pid for r in cluster.ranks] + [cluster.engines.controller_pid]


def reduce_sum(cluster: Any) -> list[str]:
    from dist_notebook.cluster.onranks.execute import run_on_ranks

    return [o.stdout for o in run_on_ranks(cluster, ALL_REDUCE, timeout=30)]


@pytest.fixture(scope="module")
def own_cluster(shell: Any) -> Iterator[Any]:
    """This module's own 2-rank cluster (with --auto-restart) as the shell's current one."""
    session = session_of(shell)
    saved = session.cluster
    session.cluster = None
    shell.run_line_magic("dist_cluster", "start -n 2 --cpu --auto-restart")
    cluster = session.cluster
    assert cluster is not None and cluster.state.value == "ready"
    pids = pids_of(cluster)
    try:
        yield cluster
    finally:
        session.cluster = saved
        pids += pids_of(cluster) if cluster.engines.controller_pid is not None else []
        cluster.stop_sync()
        left, _ = wait_gone(pids, 10)
        kill_all(left)


class Kernel:
    """A real IPython kernel process with the extension loaded and a 2-rank cluster."""

    START = (
        "%load_ext dist_notebook\n"
        "%dist_cluster start -n 2 --cpu\n"
        "import json, os\n"
        "from dist_notebook.magics.session import Session\n"
        "_c = Session.for_shell(get_ipython()).cluster\n"
        "print('PIDS ' + json.dumps({'engines': [r.pid for r in _c.ranks],"
        " 'controller': _c.engines.controller_pid, 'kernel': os.getpid(), 'id': _c.id,"
        " 'ipp': _c.engines.ipp_cluster_id, 'profile': _c.profile_dir}))\n"
    )

    def __init__(self, store: str) -> None:
        from jupyter_client import KernelManager

        self.store = store
        self.km = KernelManager(kernel_name="python3")
        # The kernel spec says "python": run this environment's interpreter, whatever PATH is.
        self.km.kernel_spec.argv[0] = sys.executable
        env = dict(os.environ, DIST_NOTEBOOK_STORE=store, PYTHONUNBUFFERED="1")
        self.km.start_kernel(env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=90)
        self.pid = self.km.provisioner.process.pid  # type: ignore[union-attr]
        self.info: dict[str, Any] = {}

    def run(self, code: str, timeout: float = 120) -> tuple[str, list[str]]:
        """Run *code*; (stdout text, error texts)."""
        out: list[str] = []
        errors: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                errors.append(f"{content['ename']}: {content['evalue']}")

        self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        return "".join(out), errors

    def start_cluster(self) -> dict[str, Any]:
        out, errors = self.run(self.START)
        assert not errors, errors
        line = next(x for x in out.splitlines() if x.startswith("PIDS "))
        self.info = json.loads(line[5:])
        return self.info

    @property
    def cluster_pids(self) -> list[int]:
        return list(self.info.get("engines", [])) + (
            [self.info["controller"]] if "controller" in self.info else []
        )

    def close(self) -> None:
        try:
            self.kc.stop_channels()
        finally:
            if self.km.is_alive():
                self.km.shutdown_kernel(now=True)
            kill_all(self.cluster_pids)


@pytest.fixture(scope="module")
def second_user() -> Iterator[tuple[int, int]]:
    """A real second Unix user (no home, no shell): (uid, gid); removed afterwards."""
    name = f"dn-other-{uuid.uuid4().hex[:6]}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        timeout=30,
    )
    try:
        out = subprocess.run(["id", "-u", name], capture_output=True, text=True, check=True)
        uid = int(out.stdout)
        gid = int(subprocess.run(["id", "-g", name], capture_output=True, text=True).stdout)
        yield uid, gid
    finally:
        subprocess.run(["userdel", name], check=False, timeout=30)


@pytest.fixture()
def shared_dir() -> Iterator[Path]:
    """A directory every user may enter and write in, sticky, like /tmp."""
    path = Path(tempfile.mkdtemp(prefix="dn-shared-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)
