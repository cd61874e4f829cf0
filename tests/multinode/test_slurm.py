"""``--launcher slurm``: one Slurm job (slurmctld on h1, a slurmd per host) runs the engines."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.slurm import jobs

from . import scenarios as s

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
HOSTS = ["h1", "h2"]


@pytest.fixture(scope="module")
def cluster(shell: Any, slurm_hosts: Any) -> Iterator[Any]:
    flags = "--launcher slurm --nodes 2 --time 10 --partition test"
    with s.magic_cluster(shell, slurm_hosts, flags) as cluster:
        yield cluster


def test_ranks_follow_slurm_node_ids(cluster: Any) -> None:
    s.expect_placement(cluster, HOSTS)


def test_dist_prints_each_ranks_host(shell: Any, cluster: Any) -> None:
    s.expect_hosts_printed(shell, cluster, HOSTS)


def test_ddp_across_hosts_records_every_rank(shell: Any, cluster: Any) -> None:
    s.expect_ddp_recorded(shell, "slurm-ddp", HOSTS)


def test_killed_host_fails_the_cell_naming_it_then_restart(shell: Any, cluster: Any) -> None:
    s.expect_killed_host(shell, cluster, HOSTS)


def test_stop_cancels_the_job_and_leaves_nothing(cluster: Any, slurm_hosts: Any) -> None:
    assert len(jobs(slurm_hosts.slurm_conf)) == 1
    s.expect_stop_leaves_nothing(cluster)
    # scancel returns before slurmctld has finished the job (state COMPLETING): wait for
    # it to leave the queue, with a bound.
    deadline = time.monotonic() + 20
    while jobs(slurm_hosts.slurm_conf) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert jobs(slurm_hosts.slurm_conf) == []


def test_killed_kernel_leaves_nothing_within_the_bound(slurm_hosts: Any) -> None:
    spec = {"n": 2, "launcher": "slurm", "nodes": 2}
    took = s.expect_killed_kernel_leaves_nothing(slurm_hosts, spec)
    print(f"slurm: hosts empty {took:.1f} s after the kernel was killed")
