"""What every launcher must do on the test hosts; each test_<launcher>.py runs these.

A cluster started with the magic serves a module's tests in order: ranks placed by
(node, local rank) with their real hosts in the store, ``%%dist`` output naming each
rank's host, a DDP run across hosts with every rank's records in the store and on the
dashboard, a host whose engines are killed (the cell fails naming host and rank, the
survivors are released, ``restart`` brings the ranks back), then ``stop`` leaving nothing
on any host. A killed kernel is checked with a cluster of its own, in a subprocess.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psutil
import pytest
from conftest import session_of
from IPython.utils.capture import capture_output
from ranklines import printed_by

from dist_notebook import load_run
from dist_notebook.cluster.onranks.execute import RankError
from dist_notebook.store import StoreReader
from testbed.cells import TRAIN_CELL
from testbed.hosts import TestHosts

from .conftest import ORPHAN_BOUND_S, engines_on, left_on, nothing_left, wait_for

# A collective every 50 ms for ~60 s: a failure during it must end the cell early.
COLLECTIVES = """
import time
x = torch.ones(1)
for _ in range(1200):
    dist.all_reduce(x)
    time.sleep(0.05)
"""


@contextmanager
def magic_cluster(shell: Any, hosts: TestHosts, flags: str) -> Iterator[Any]:
    """``%dist_cluster start {flags}`` as the session's cluster; stopped afterwards."""
    session = session_of(shell)
    saved, session.cluster = session.cluster, None
    try:
        with capture_output() as cap:
            shell.run_line_magic("dist_cluster", f"start {flags} --interface {hosts.bridge}")
        cluster = session.cluster
        cluster.start_table = cap.stdout + "".join(str(o.data) for o in cap.outputs)
        cluster.test_hosts = hosts
        yield cluster
        cluster.stop_sync()
    finally:
        session.cluster = saved


def expect_placement(cluster: Any, hosts: list[str]) -> None:
    assert [(r.rank, r.host) for r in cluster.ranks] == list(enumerate(hosts))
    for name in set(hosts):
        assert name in cluster.start_table, cluster.start_table
    # Ranks on more than one node: the start table has a node column, node ranks as placed.
    if len(set(hosts)) > 1:
        assert "rank  node  host" in cluster.start_table, cluster.start_table
    nodes = [sorted(set(hosts), key=hosts.index).index(h) for h in hosts]
    assert [r.node_rank for r in cluster.ranks] == nodes
    # The store's rank table has every rank's real host (the panel groups by it).
    stored = {r["rank"]: r["host"] for r in StoreReader().ranks(cluster.id)}
    assert stored == dict(enumerate(hosts))


def expect_hosts_printed(shell: Any, cluster: Any, hosts: list[str]) -> None:
    code = (
        "import os, socket\n"
        "print(rank, socket.gethostname(), os.environ['NODE_RANK'], os.environ['LOCAL_RANK'],"
        " os.environ['WORLD_SIZE'], os.environ['MASTER_ADDR'])"
    )
    with capture_output() as cap:
        shell.run_cell_magic("dist", "", code)
    master = next(h.address for h in cluster.test_hosts.hosts if h.name == hosts[0])
    node, local = 0, 0
    for rank, host in enumerate(hosts):
        if rank and host != hosts[rank - 1]:
            node, local = node + 1, 0
        line = f"[rank {rank}] {rank} {host} {node} {local} {len(hosts)} {master}"
        assert line in cap.stdout, cap.stdout
        local += 1


def expect_ddp_recorded(shell: Any, name: str, hosts: list[str]) -> None:
    magics = shell.magics_manager.registry["TrainMagics"]
    with capture_output():
        shell.run_cell_magic("dist_train", f"--name {name} --steps 20", TRAIN_CELL.format(steps=20))
    assert magics.last_result.state.value == "succeeded"
    records = load_run(name).records()
    ranks = range(len(hosts))
    steps = {r: sorted(rec.step for rec in records if rec.rank == r) for r in ranks}
    assert steps == {r: list(range(20)) for r in ranks}
    # The dashboard shows every rank, under its host.
    summary = magics.last_dashboard.summary()
    assert {(r.rank, r.host, r.records) for r in summary.ranks} == {
        (r, hosts[r], 20) for r in ranks
    }


def kill_engines(host: Any) -> None:
    for p in engines_on(host):
        p.send_signal(signal.SIGKILL)


def fails_naming(shell: Any, host: str, ranks: list[int], action: Callable[[], Any]) -> str:
    """Run collectives, do *action* 3 s in; the cell must fail naming *host* and *ranks*."""
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


def expect_restart(shell: Any, cluster: Any, hosts: list[str]) -> None:
    with capture_output():
        shell.run_line_magic("dist_cluster", "restart")
    assert cluster.state.value == "ready"
    assert [r.host for r in cluster.ranks] == hosts
    with capture_output() as cap:
        shell.run_cell_magic("dist", "", "x = torch.ones(1); dist.all_reduce(x); print(x.item())")
    assert printed_by(cap.stdout, f"{float(len(hosts))}") == set(range(len(hosts))), cap.stdout


def expect_killed_host(shell: Any, cluster: Any, hosts: list[str]) -> None:
    last = cluster.test_hosts.hosts[-1]
    lost = [r for r, h in enumerate(hosts) if h == last.name]
    fails_naming(shell, last.name, lost, lambda: kill_engines(last))
    assert cluster.state.value == "degraded"
    expect_restart(shell, cluster, hosts)


def expect_stop_leaves_nothing(cluster: Any) -> None:
    hosts = cluster.test_hosts
    assert all(engines_on(h) for h in hosts.hosts)
    cluster.stop_sync()
    wait_for(f"nothing left on the hosts {left_on(hosts)}", nothing_left(hosts), 15)


KERNEL = textwrap.dedent(
    """
    import json, sys, time
    from dist_notebook import ClusterSpec, DistCluster

    cluster = DistCluster(ClusterSpec(**json.loads(sys.argv[1])))
    cluster.start_sync()
    print(json.dumps({"id": cluster.id, "hosts": [r.host for r in cluster.ranks]}), flush=True)
    time.sleep(300)  # until the test kills us
    """
)


def expect_killed_kernel_leaves_nothing(hosts: TestHosts, spec: dict[str, Any]) -> float:
    """Start a cluster in a kernel-like process, SIGKILL it; return how long the hosts
    took to be empty (fails beyond ORPHAN_BOUND_S). Nothing of the cluster's is left on
    this machine either: no process, no folder in the temporary directory."""
    proc = subprocess.Popen(
        [sys.executable, "-c", KERNEL, json.dumps(dict(spec, ip=hosts.gateway))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"the kernel failed to start its cluster:\n{proc.stderr.read()}")
        started = json.loads(line)
        assert started["hosts"] == [h.name for h in hosts.hosts]
        local = psutil.Process(proc.pid).children(recursive=True)
        assert all(engines_on(h) for h in hosts.hosts)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        took = wait_for(
            f"a killed kernel's engines end {left_on(hosts)}", nothing_left(hosts), ORPHAN_BOUND_S
        )
        wait_for("its local processes end", lambda: not any(_alive(p) for p in local), 15)
        # Nobody is left to remove a folder of the kernel's (its remote engines watch
        # the controller, not the kernel): none may have been made.
        pattern = os.path.join(tempfile.gettempdir(), f"dist-notebook-{started['id']}-*")
        left = glob.glob(pattern)
        assert not left, f"the killed kernel's cluster left {left}"
        return took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
