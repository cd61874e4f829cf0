"""``--launcher ssh`` on two real test hosts (network namespaces running sshd).

One 3-rank cluster (h1:2, h2:1) started with the magic serves the tests in order: ranks
placed by (node, local rank), ``%%dist`` output naming each rank's host, a DDP run across
hosts with every rank's records in the store, a host whose engines are killed and one
whose link goes down (the cell fails naming host and ranks, ``restart`` brings the ranks
back), then ``stop`` leaving nothing on any host. A killed kernel is tested with a
cluster of its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from conftest import session_of
from IPython.utils.capture import capture_output
from training.conftest import TRAIN_CELL

from dist_notebook import load_run
from dist_notebook.cluster.execute import RankError
from dist_notebook.store import StoreReader

from .conftest import ORPHAN_BOUND_S, engines_on, left_on, nothing_left, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# A collective every 50 ms for ~60 s: a failure during it must end the cell early.
COLLECTIVES = """
import time
x = torch.ones(1)
for _ in range(1200):
    dist.all_reduce(x)
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def cluster(shell: Any, ssh_hosts: Any) -> Iterator[Any]:
    session = session_of(shell)
    saved, session.cluster = session.cluster, None
    with capture_output() as cap:
        shell.run_line_magic(
            "dist_cluster",
            f"start --launcher ssh --hosts h1:2,h2:1 --interface {ssh_hosts.bridge}",
        )
    cluster = session.cluster
    cluster.start_table = cap.stdout + "".join(str(o.data) for o in cap.outputs)
    cluster._test_hosts = ssh_hosts
    try:
        yield cluster
    finally:
        cluster.stop_sync()
        session.cluster = saved


def test_ranks_are_ordered_by_node_then_local_rank(cluster: Any) -> None:
    assert [(r.rank, r.host) for r in cluster.ranks] == [(0, "h1"), (1, "h1"), (2, "h2")]
    assert "h1" in cluster.start_table and "h2" in cluster.start_table
    # The store's rank table has every rank's real host (the panel groups by it).
    hosts = {r["rank"]: r["host"] for r in StoreReader().ranks(cluster.id)}
    assert hosts == {0: "h1", 1: "h1", 2: "h2"}


def test_dist_prints_each_ranks_host(shell: Any, cluster: Any) -> None:
    code = (
        "import os, socket\n"
        "print(rank, socket.gethostname(), os.environ['NODE_RANK'], os.environ['LOCAL_RANK'],"
        " os.environ['LOCAL_WORLD_SIZE'], os.environ['WORLD_SIZE'], os.environ['MASTER_ADDR'])"
    )
    with capture_output() as cap:
        shell.run_cell_magic("dist", "", code)
    master = next(h.address for h in cluster_hosts(cluster) if h.name == "h1")
    for line in (
        f"[rank 0] 0 h1 0 0 2 3 {master}",
        f"[rank 1] 1 h1 0 1 2 3 {master}",
        f"[rank 2] 2 h2 1 0 1 3 {master}",
    ):
        assert line in cap.stdout, cap.stdout


def cluster_hosts(cluster: Any) -> list[Any]:
    return cluster._test_hosts.hosts


def test_ddp_across_hosts_stores_every_ranks_records(shell: Any, cluster: Any) -> None:
    magics = shell.magics_manager.registry["TrainMagics"]
    with capture_output():
        shell.run_cell_magic("dist_train", "--name ssh-ddp --steps 20", TRAIN_CELL.format(steps=20))
    assert magics.last_result.state.value == "succeeded"
    records = load_run("ssh-ddp").records()
    steps = {r: sorted(rec.step for rec in records if rec.rank == r) for r in range(3)}
    assert steps == {r: list(range(20)) for r in range(3)}
    # The dashboard shows every rank, under its host.
    summary = magics.last_dashboard.summary()
    assert {(r.rank, r.host, r.records) for r in summary.ranks} == {
        (0, "h1", 20),
        (1, "h1", 20),
        (2, "h2", 20),
    }


def _kill_engines(host: Any) -> list[int]:
    victims = engines_on(host)
    for p in victims:
        p.send_signal(signal.SIGKILL)
    return [p.pid for p in victims]


def _fails_naming(shell: Any, host: str, ranks: list[int], action: Any) -> str:
    timer = threading.Timer(3.0, action)
    timer.start()
    try:
        with pytest.raises(RankError) as info, capture_output():
            shell.run_cell_magic("dist", "", COLLECTIVES)
    finally:
        timer.join()
    message = str(info.value) + "\n" + "\n".join(info.value._render_traceback_())
    for rank in ranks:
        assert f"rank {rank} (" in message and f"host {host}" in message, message
    return message


def _restart(shell: Any, cluster: Any) -> None:
    with capture_output():
        shell.run_line_magic("dist_cluster", "restart")
    assert cluster.state.value == "ready"
    assert [r.host for r in cluster.ranks] == ["h1", "h1", "h2"]
    with capture_output() as cap:
        shell.run_cell_magic("dist", "", "x = torch.ones(1); dist.all_reduce(x); print(x.item())")
    assert cap.stdout.count("3.0") == 3, cap.stdout


def test_killed_host_fails_the_cell_naming_it_then_restart(shell: Any, cluster: Any) -> None:
    h2 = cluster_hosts(cluster)[1]
    _fails_naming(shell, "h2", [2], lambda: _kill_engines(h2))
    assert cluster.state.value == "degraded"
    _restart(shell, cluster)


def test_host_link_down_fails_the_cell_then_restart(shell: Any, cluster: Any) -> None:
    hosts = cluster._test_hosts
    h2 = hosts.hosts[1]
    try:
        message = _fails_naming(shell, "h2", [2], lambda: hosts.link(h2, up=False))
        assert "stopped answering" in message
        # Cut off from the controller, h2's engine ends by itself (missed heartbeats).
        wait_for("h2's engine exits without its controller", lambda: not engines_on(h2), 30)
    finally:
        hosts.link(h2, up=True)
    _restart(shell, cluster)


def test_stop_leaves_nothing_on_any_host(cluster: Any) -> None:
    hosts = cluster._test_hosts
    assert all(engines_on(h) for h in hosts.hosts)
    cluster.stop_sync()
    wait_for(f"nothing left on the hosts {left_on(hosts)}", nothing_left(hosts), 15)


KERNEL = textwrap.dedent(
    """
    import json, sys, time
    from dist_notebook import ClusterSpec, DistCluster

    spec = ClusterSpec(n=2, launcher="ssh", hosts=(("h1", 1), ("h2", 1)), ip=sys.argv[1])
    cluster = DistCluster(spec)
    cluster.start_sync()
    print(json.dumps([r.host for r in cluster.ranks]), flush=True)
    time.sleep(300)  # until the test kills us
    """
)


def test_killed_kernel_leaves_nothing_within_the_bound(ssh_hosts: Any) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", KERNEL, ssh_hosts.gateway],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"the kernel failed to start its cluster:\n{proc.stderr.read()}")  # type: ignore[union-attr]
        assert json.loads(line) == ["h1", "h2"]
        local = psutil.Process(proc.pid).children(recursive=True)
        assert all(engines_on(h) for h in ssh_hosts.hosts)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        took = wait_for(
            f"a killed kernel's engines end {left_on(ssh_hosts)}",
            nothing_left(ssh_hosts),
            ORPHAN_BOUND_S,
        )
        print(f"killed kernel: hosts empty after {took:.1f} s")
        wait_for(
            "the kernel's local processes end", lambda: not any(p.is_running() for p in local), 15
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
