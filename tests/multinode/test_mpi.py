"""``--launcher mpi``: Open MPI's mpiexec starts the engines on the test hosts over ssh."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from . import scenarios as s

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
HOSTS = ["h1", "h2"]


@pytest.fixture(scope="module")
def cluster(shell: Any, mpi_hosts: Any) -> Iterator[Any]:
    with s.magic_cluster(shell, mpi_hosts, "--launcher mpi --hosts h1:1,h2:1") as cluster:
        yield cluster


def test_ranks_follow_mpi_placement(cluster: Any) -> None:
    s.expect_placement(cluster, HOSTS)


def test_dist_prints_each_ranks_host(shell: Any, cluster: Any) -> None:
    s.expect_hosts_printed(shell, cluster, HOSTS)


def test_ddp_across_hosts_records_every_rank(shell: Any, cluster: Any) -> None:
    s.expect_ddp_recorded(shell, "mpi-ddp", HOSTS)


def test_killed_host_fails_the_cell_naming_it_then_restart(shell: Any, cluster: Any) -> None:
    s.expect_killed_host(shell, cluster, HOSTS)


def test_stop_leaves_nothing_on_any_host(cluster: Any) -> None:
    s.expect_stop_leaves_nothing(cluster)


def test_killed_kernel_leaves_nothing_within_the_bound(mpi_hosts: Any) -> None:
    spec = {"n": 2, "launcher": "mpi", "hosts": [["h1", 1], ["h2", 1]]}
    took = s.expect_killed_kernel_leaves_nothing(mpi_hosts, spec)
    print(f"mpi: hosts empty {took:.1f} s after the kernel was killed")
