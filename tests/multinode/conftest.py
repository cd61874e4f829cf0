"""Test hosts for the multi-node tests: network namespaces with real daemons.

``ssh_hosts``: hosts h1 and h2, each with its own address, hostname and PID namespace,
running Debian's sshd with a key made for this session; ``DIST_NOTEBOOK_SSH_CONFIG``
points the engines' ssh at a client config naming them. Everything (daemons, engines,
namespaces, the bridge) is torn down at the end, also when a test fails. Without root
or the Debian packages the tests skip with the reason (``make testhosts`` installs them).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest

from dist_notebook.cluster.launchers import SSH_CONFIG_ENV
from testbed.hosts import Host, TestHosts, why_not
from testbed.sshd import start_sshd

# A killed kernel's engines on other hosts are gone within this bound (the README
# states it): the controller exits with the kernel (0.25 s); engines check the
# controller's heartbeat every second and leave after 10 misses (~10 s); Slurm then
# ends the job step. Measured 10-16 s on a busy 2-core machine.
ORPHAN_BOUND_S = 30.0


def build_hosts(kind: str, tmp: Any, count: int = 2) -> TestHosts:
    reason = why_not(kind)
    if reason:
        pytest.skip(reason)
    try:
        return TestHosts(tmp, count).up()
    except subprocess.CalledProcessError as e:
        # Root without CAP_NET_ADMIN / CAP_SYS_ADMIN (some containers): say so, skip.
        if "not permitted" in (e.stderr or "").lower():
            pytest.skip(f"cannot build test hosts here ({' '.join(e.cmd)}): {e.stderr.strip()}")
        raise


@pytest.fixture(scope="session")
def ssh_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestHosts]:
    hosts = build_hosts("ssh", tmp_path_factory.mktemp("hosts"))
    old = os.environ.get(SSH_CONFIG_ENV)
    try:
        os.environ[SSH_CONFIG_ENV] = str(start_sshd(hosts))
        yield hosts
    finally:
        hosts.down()
        if old is None:
            os.environ.pop(SSH_CONFIG_ENV, None)
        else:
            os.environ[SSH_CONFIG_ENV] = old


@pytest.fixture(scope="session")
def mpi_hosts(ssh_hosts: TestHosts) -> TestHosts:
    """The ssh hosts: mpiexec reaches them over the same sshd."""
    reason = why_not("mpi")
    if reason:
        pytest.skip(reason)
    return ssh_hosts


@pytest.fixture(scope="session")
def slurm_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestHosts]:
    """Hosts h1 and h2 with munged, slurmctld (on h1) and a slurmd each."""
    from testbed.slurm import start_slurm

    hosts = build_hosts("slurm", tmp_path_factory.mktemp("slurmhosts"))
    old = os.environ.get("SLURM_CONF")
    munged = None
    try:
        hosts.slurm_conf, munged = start_slurm(hosts)  # type: ignore[attr-defined]
        os.environ["SLURM_CONF"] = str(hosts.slurm_conf)  # type: ignore[attr-defined]
        yield hosts
    finally:
        hosts.down()
        if munged is not None:
            munged.terminate()
            munged.wait(10)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def engines_on(host: Host) -> list[Any]:
    """Engine processes (our boot module) running on *host*."""
    out = []
    for p in host.processes():
        try:
            if "dist_notebook.boot.engine" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            continue  # gone between listing and reading: not an engine now
    return out


def wait_for(what: str, ok: Callable[[], Any], timeout: float) -> float:
    """Poll *ok* until true; return the seconds it took, or fail naming *what*."""
    t0 = time.monotonic()
    while not ok():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(0.2)
    return time.monotonic() - t0


def nothing_left(hosts: TestHosts) -> Callable[[], bool]:
    return lambda: not any(h.processes() for h in hosts.hosts)


def left_on(hosts: TestHosts) -> dict[str, list[str]]:
    return {h.name: [" ".join(p.cmdline())[:80] for p in h.processes()] for h in hosts.hosts}
