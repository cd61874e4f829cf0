"""Every mistake a user can make with the multi-node flags names its fix (no cluster
starts: the checks run before anything is launched)."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

from dist_notebook.cluster import ClusterConfigError, ClusterSpec
from dist_notebook.cluster.hosts import HostsError, interface_address, parse_hosts

BAD_STARTS = [
    ("--launcher ssh --ip 10.0.0.1", "--launcher ssh needs --hosts, e.g. --hosts node1:2"),
    ("--launcher ssh --hosts 'a b' --ip 10.0.0.1", "is not a host name; write it like"),
    ("--launcher ssh --hosts n1:x --ip 10.0.0.1", "not a whole number; write it like node1:2"),
    ("--launcher ssh --hosts n1:0 --ip 10.0.0.1", "asks for 0 ranks; give 1 or more"),
    ("--launcher ssh --hosts n1,n1 --ip 10.0.0.1", "lists n1 twice"),
    ("--launcher ssh --hosts n1:2,n2:2 -n 3 --ip 10.0.0.1", "drop -n (it follows --hosts)"),
    ("--launcher ssh --hosts n1:2", "which other hosts cannot reach; add --interface NAME"),
    ("--launcher mpi --hosts n1 --gpus 0 --ip 10.0.0.1", "on other hosts use --gpus-per-node"),
    ("--launcher slurm --nodes 2 -n 3 --ip 10.0.0.1", "do not split evenly over --nodes 2"),
    ("--launcher slurm --time soon --ip 10.0.0.1", "is not a Slurm time; write MINUTES"),
    ("--launcher slurm --nodes 2 --gpus-per-node 4 -n 4 --ip 10.0.0.1", "drop -n, or use -n 8"),
    ("--launcher slurm --hosts n1 --ip 10.0.0.1", "Slurm picks the hosts: use --nodes N"),
    ("--launcher ssh --hosts n1 --partition gpu --ip 10.0.0.1", "add --launcher slurm"),
    ("--hosts n1:2", "needs a remote launcher: add --launcher ssh, mpi or slurm"),
    ("--nodes 2", "needs a remote launcher"),
    ("--interface nosuch0", "no such interface here; choose one of:"),
    ("--launcher ssh --hosts n1 --interface lo --ip 10.0.0.1", "give --ip or --interface"),
]


@pytest.mark.parametrize("flags, message", BAD_STARTS)
def test_bad_remote_start_names_the_fix(no_cluster: Any, flags: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        no_cluster.run_line_magic("dist_cluster", f"start {flags}")
    assert message in str(info.value)


def test_scale_without_a_cluster_says_how_to_start_one(no_cluster: Any) -> None:
    with pytest.raises(UsageError, match="no cluster to scale: start one with %dist_cluster"):
        no_cluster.run_line_magic("dist_cluster", "scale 3")


def test_spec_checks_apply_without_the_magic() -> None:
    with pytest.raises(ClusterConfigError, match="--launcher ssh needs --hosts"):
        ClusterSpec(n=2, launcher="ssh")
    with pytest.raises(ClusterConfigError, match="one GPU per rank"):
        ClusterSpec(n=3, launcher="ssh", hosts=(("a", 3),), gpus_per_node=2)
    spec = ClusterSpec(n=8, launcher="slurm", nodes=2, gpus_per_node=4)
    assert spec.resolved_backend == "nccl"


def test_hosts_and_interfaces_parse() -> None:
    assert parse_hosts("a:2, user@b") == (("a", 2), ("user@b", 1))
    assert interface_address("lo") == "127.0.0.1"
    with pytest.raises(HostsError, match="--hosts is empty"):
        parse_hosts(" , ")


def test_without_root_the_host_tests_skip_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from testbed.hosts import why_not

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    for kind in ("ssh", "mpi", "slurm"):
        assert "test hosts need root" in (why_not(kind) or "")
