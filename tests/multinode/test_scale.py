"""``%dist_cluster scale N`` between cells: local engines (no root needed), then the
ssh, mpi and Slurm launchers on the test hosts (root).

Growing adds engines through the launcher and renumbers; shrinking stops the engines of
the highest ranks (their processes are gone); each time the group is new (a fresh store
port), every rank's ``world_size`` follows, and a DDP model built again trains with the
same global batch. On the test hosts each launcher also shows where ranks go (ssh and
mpi: the least-loaded host grows, the most loaded shrinks; Slurm: one more job, the
newest ranks leave first and an emptied job is cancelled), each rank's NODE_RANK,
LOCAL_RANK and LOCAL_WORLD_SIZE after the change, and a stop that leaves nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from conftest import session_of
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output
from ranklines import printed_by

from .conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# The per-rank batch comes from a global batch: the global batch stays 48 at any size.
DDP_STEP = """
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1))
per_rank = 48 // world_size
x = torch.randn(per_rank, 4)
model(x).sum().backward()
seen = torch.tensor([float(per_rank)])
dist.all_reduce(seen)
print("global batch", int(seen.item()), "world", world_size, dist.get_world_size())
"""


@pytest.fixture(scope="module")
def cluster(shell: Any) -> Iterator[Any]:
    session = session_of(shell)
    saved, session.cluster = session.cluster, None
    try:
        with capture_output():
            shell.run_line_magic("dist_cluster", "start -n 2 --cpu")
        yield session.cluster
        session.cluster.stop_sync()
    finally:
        session.cluster = saved


def _scale(shell: Any, n: int) -> str:
    with capture_output() as cap:
        shell.run_line_magic("dist_cluster", f"scale {n}")
    return cap.stdout


def _step(shell: Any) -> str:
    with capture_output() as cap:
        shell.run_cell_magic("dist", "", DDP_STEP)
    return cap.stdout


def test_scale_up_adds_ranks_and_a_fresh_group(shell: Any, cluster: Any) -> None:
    with capture_output():
        shell.run_cell_magic("dist", "", "keep = rank * 10")
    port_before = _store_port(shell)
    out = _scale(shell, 3)
    assert "3 ranks" in out and "DDP model again" in out
    assert [r.rank for r in cluster.ranks] == [0, 1, 2] and cluster.n == 3
    assert _store_port(shell) != port_before
    out = _step(shell)
    assert printed_by(out, "global batch 48 world 3 3") == {0, 1, 2}, out
    _expect_threads(shell, [3, 3, 3])
    # Survivors keep their namespace; the new rank starts empty.
    with capture_output() as cap:
        shell.run_cell_magic("dist", "", "print(globals().get('keep'))")
    for line in ("[rank 0] 0", "[rank 1] 10", "[rank 2] None"):
        assert line in cap.stdout, cap.stdout


def test_scale_down_stops_the_highest_ranks(shell: Any, cluster: Any) -> None:
    leaving = psutil.Process(cluster.ranks[2].pid)
    _scale(shell, 2)
    assert [r.rank for r in cluster.ranks] == [0, 1] and cluster.n == 2
    wait_for("rank 2's engine exits", lambda: not _alive(leaving), 30)
    out = _step(shell)
    assert printed_by(out, "global batch 48 world 2 2") == {0, 1}, out
    assert cluster.dead_ranks() == {}


def _said_of(cluster: Any) -> list[tuple[str, int, dict[int, str]]]:
    """(state, n, {rank: state}) of *cluster* in memory, in the run store and in the REST
    API's answer (the server's manager over the same store, as its handler replies)."""
    from dist_notebook.server.manager import RunStoreManager
    from dist_notebook.store import StoreReader

    reader = StoreReader()
    try:
        row = reader.cluster(cluster.id)
    finally:
        reader.close()
    api = RunStoreManager().cluster(cluster.id)
    return [
        (cluster.state.value, cluster.n, {r.rank: r.state for r in cluster.ranks}),
        (row["state"], row["n"], {r["rank"]: r["state"] for r in row["ranks"]}),
        (api["state"], api["n"], {r["rank"]: r["state"] for r in api["ranks"]}),
    ]


def test_every_rank_takes_the_thread_count_of_the_new_layout(shell: Any, cluster: Any) -> None:
    # The cores over the ranks: the survivor of 2 -> 1 gets twice the threads (on any
    # machine of 2 cores or more), and both ranks of 1 -> 2 get half.
    for n in (1, 2):
        _scale(shell, n)
        _expect_threads(shell, [n] * n)


def test_scale_errors_name_the_fix(shell: Any, cluster: Any) -> None:
    with pytest.raises(UsageError, match="needs the new number of ranks, e.g. scale 4"):
        shell.run_line_magic("dist_cluster", "scale")
    with pytest.raises(UsageError, match="must be 1 or more"):
        shell.run_line_magic("dist_cluster", "scale 0")


def test_after_scale_4_memory_store_and_api_say_4_ranks_and_after_stop_stopped(
    shell: Any, cluster: Any
) -> None:
    _scale(shell, 4)
    idle = {r: "idle" for r in range(4)}
    assert _said_of(cluster) == [("ready", 4, idle)] * 3
    _scale(shell, 2)
    assert _said_of(cluster) == [("ready", 2, {0: "idle", 1: "idle"})] * 3
    cluster.stop_sync()
    stopped = ("stopped", 2, {0: "stopped", 1: "stopped"})
    assert _said_of(cluster) == [stopped] * 3


THREADS = (
    "import os\n"
    "print('threads', os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'],"
    " torch.get_num_threads())"
)


def _threads(ranks_on_host: int) -> int:
    """The threads of a rank sharing its host's cores with *ranks_on_host* ranks (the
    test hosts see this machine's cores)."""
    return max(1, (os.cpu_count() or 1) // ranks_on_host)


def _expect_threads(shell: Any, ranks_on_host: list[int]) -> None:
    """Rank r's OMP_NUM_THREADS, MKL_NUM_THREADS and torch threads are the cores over
    ranks_on_host[r], the ranks on its host."""
    with capture_output() as cap:
        shell.run_cell_magic("dist", "", THREADS)
    for rank, count in enumerate(ranks_on_host):
        t = _threads(count)
        assert rank in printed_by(cap.stdout, f"threads {t} {t} {t}"), cap.stdout


def _store_port(shell: Any) -> str:
    with capture_output() as cap:
        shell.run_cell_magic("dist", "--ranks 0", "import os; print(os.environ['MASTER_PORT'])")
    return cap.stdout.strip()


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- on the test hosts: the ssh, mpi and Slurm launchers ----------------------------
#
# One cluster per launcher serves its module-ordered tests: grow, a DDP step across the
# new ranks, shrink, stop (nothing left on any host). The hosts are the session's.

PLACES = (
    "import os, socket\n"
    "print('at', rank, socket.gethostname(), os.environ['NODE_RANK'], os.environ['LOCAL_RANK'],"
    " os.environ['LOCAL_WORLD_SIZE'], os.environ['WORLD_SIZE'], os.environ['MASTER_ADDR'])"
)


def _expect_places(shell: Any, cluster: Any, hosts: list[str]) -> None:
    """Each rank's host, NODE_RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE, MASTER_ADDR
    are right after the change, in the store too (node_rank); its threads are its host's
    cores over the ranks there now."""
    from dist_notebook.store import StoreReader

    assert [r.host for r in cluster.ranks] == hosts
    with capture_output() as cap:
        shell.run_cell_magic("dist", "", PLACES)
    master = next(h.address for h in cluster.test_hosts.hosts if h.name == hosts[0])
    nodes = list(dict.fromkeys(hosts))
    seen: dict[str, int] = {}
    for rank, host in enumerate(hosts):
        local = seen[host] = seen.get(host, -1) + 1
        line = (
            f"at {rank} {host} {nodes.index(host)} {local} {hosts.count(host)} "
            f"{len(hosts)} {master}"
        )
        assert line in cap.stdout, cap.stdout
    _expect_threads(shell, [hosts.count(h) for h in hosts])
    stored = [(r["host"], r["node_rank"]) for r in StoreReader().ranks(cluster.id)]
    assert stored == [(h, nodes.index(h)) for h in hosts]
    assert [r.node_rank for r in cluster.ranks] == [nodes.index(h) for h in hosts]


def _expect_ddp(shell: Any, n: int) -> None:
    out = _step(shell)
    assert printed_by(out, f"global batch 48 world {n} {n}") == set(range(n)), out


def _engines(host: Any) -> list[Any]:
    """Engine processes on *host*: not the ``srun`` of a Slurm job (its command line
    names the engine's too)."""
    from .conftest import engines_on

    return [p for p in engines_on(host) if os.path.basename(p.cmdline()[0]) != "srun"]


def _engines_per_host(cluster: Any) -> dict[str, int]:
    return {h.name: len(_engines(h)) for h in cluster.test_hosts.hosts}


def _engine_processes(cluster: Any) -> dict[str, list[str]]:
    return {
        h.name: [" ".join(p.cmdline())[-60:] for p in _engines(h)] for h in cluster.test_hosts.hosts
    }


def _expect_engines(cluster: Any, counts: dict[str, int]) -> None:
    deadline = time.monotonic() + 30
    while _engines_per_host(cluster) != counts:
        if time.monotonic() > deadline:
            pytest.fail(f"engines per host: not {counts} within 30 s: {_engine_processes(cluster)}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def ssh_cluster(shell: Any, ssh_hosts: Any) -> Iterator[Any]:
    from .scenarios import magic_cluster

    with magic_cluster(shell, ssh_hosts, "--launcher ssh --hosts h1:1,h2:1") as cluster:
        yield cluster


def test_ssh_grows_onto_the_least_loaded_host(shell: Any, ssh_cluster: Any) -> None:
    with capture_output():
        shell.run_cell_magic("dist", "", "keep = rank * 10")
    port = _store_port(shell)
    out = _scale(shell, 3)  # h1:1,h2:1 -> h1:2,h2:1 (a tie: the first host)
    assert "3 ranks" in out, out
    assert _store_port(shell) != port
    _expect_places(shell, ssh_cluster, ["h1", "h1", "h2"])
    _expect_ddp(shell, 3)
    with capture_output() as cap:
        shell.run_cell_magic("dist", "", "print('kept', globals().get('keep'))")
    for line in ("[rank 0] kept 0", "[rank 1] kept None", "[rank 2] kept 10"):
        assert line in cap.stdout, cap.stdout


def test_ssh_layout_given_with_hosts_moves_ranks(shell: Any, ssh_cluster: Any) -> None:
    with capture_output():
        shell.run_line_magic("dist_cluster", "scale --hosts h1:1,h2:2")
    _expect_places(shell, ssh_cluster, ["h1", "h2", "h2"])
    _expect_engines(ssh_cluster, {"h1": 1, "h2": 2})
    _expect_ddp(shell, 3)


def test_ssh_failed_grow_names_the_host_and_goes_on(shell: Any, ssh_cluster: Any) -> None:
    # Nothing listens for ssh on this machine's loopback: the new engine cannot start.
    with pytest.raises(UsageError, match=r"on 127\.0\.0\.1:1 failed.*with the 3 ranks it kept"):
        shell.run_line_magic("dist_cluster", "scale --hosts h1:1,h2:2,127.0.0.1:1")
    assert ssh_cluster.state.value == "ready"
    _expect_places(shell, ssh_cluster, ["h1", "h2", "h2"])
    # A restart would start the cluster as scale left it, in one engine set.
    config = ssh_cluster.engines.launcher_config("RankSSHEngineSetLauncher")
    assert config.engines == {"h1": 1, "h2": 2}


def test_ssh_shrinks_the_most_loaded_host(shell: Any, ssh_cluster: Any) -> None:
    _scale(shell, 1)  # h1:1,h2:2 -> h1:1,h2:1 -> h1:1 (a tie: the last host)
    _expect_places(shell, ssh_cluster, ["h1"])
    _expect_engines(ssh_cluster, {"h1": 1, "h2": 0})
    _expect_ddp(shell, 1)
    assert ssh_cluster.dead_ranks() == {}


def test_ssh_stop_after_scaling_leaves_nothing(ssh_cluster: Any) -> None:
    _stop_leaves_nothing(ssh_cluster)


def _stop_leaves_nothing(cluster: Any) -> None:
    """Stop: no process left on any host (also on one that scale emptied)."""
    from .conftest import left_on, nothing_left

    hosts = cluster.test_hosts
    assert any(_engines(h) for h in hosts.hosts)
    cluster.stop_sync()
    wait_for(f"nothing left on the hosts {left_on(hosts)}", nothing_left(hosts), 15)


@pytest.fixture(scope="module")
def mpi_cluster(shell: Any, mpi_hosts: Any) -> Iterator[Any]:
    from .scenarios import magic_cluster

    with magic_cluster(shell, mpi_hosts, "--launcher mpi --hosts h1:1,h2:1") as cluster:
        yield cluster


def test_mpi_grows_with_another_mpiexec(shell: Any, mpi_cluster: Any) -> None:
    sets = len(mpi_cluster.engines.engine_sets())
    _scale(shell, 3)
    assert len(mpi_cluster.engines.engine_sets()) == sets + 1
    # The new engine's local rank follows h1's present one.
    _expect_places(shell, mpi_cluster, ["h1", "h1", "h2"])
    _expect_ddp(shell, 3)


def test_mpi_shrinks_and_stops_an_empty_mpiexec(shell: Any, mpi_cluster: Any) -> None:
    _scale(shell, 1)  # h1:2,h2:1 -> h1:1,h2:1 (the added mpiexec is empty) -> h1:1
    assert len(mpi_cluster.engines.engine_sets()) == 1
    _expect_places(shell, mpi_cluster, ["h1"])
    _expect_engines(mpi_cluster, {"h1": 1, "h2": 0})
    _expect_ddp(shell, 1)
    _stop_leaves_nothing(mpi_cluster)


@pytest.fixture(scope="module")
def slurm_cluster(shell: Any, slurm_hosts: Any) -> Iterator[Any]:
    from .scenarios import magic_cluster

    flags = "--launcher slurm --nodes 2 --time 10 --partition test"
    with magic_cluster(shell, slurm_hosts, flags) as cluster:
        yield cluster


def test_slurm_grows_by_another_job(shell: Any, slurm_cluster: Any, slurm_hosts: Any) -> None:
    from testbed.slurm import jobs

    _scale(shell, 4)
    assert len(jobs(slurm_hosts.slurm_conf)) == 2
    _expect_places(shell, slurm_cluster, ["h1", "h1", "h2", "h2"])
    _expect_ddp(shell, 4)


def test_slurm_shrinks_and_cancels_the_empty_job(
    shell: Any, slurm_cluster: Any, slurm_hosts: Any
) -> None:
    from testbed.slurm import jobs

    from .scenarios import expect_stop_leaves_nothing

    _scale(shell, 3)  # the newest rank goes first: the added job keeps one
    assert len(jobs(slurm_hosts.slurm_conf)) == 2
    _expect_ddp(shell, 3)
    _scale(shell, 2)  # the added job is empty: cancelled
    wait_for("the emptied job leaves the queue", lambda: len(jobs(slurm_hosts.slurm_conf)) == 1, 20)
    _expect_places(shell, slurm_cluster, ["h1", "h2"])
    _expect_engines(slurm_cluster, {"h1": 1, "h2": 1})
    _expect_ddp(shell, 2)
    expect_stop_leaves_nothing(slurm_cluster)
    wait_for("no job left", lambda: not jobs(slurm_hosts.slurm_conf), 20)


def test_slurm_restart_after_a_scale_starts_the_layout_scale_left(
    shell: Any, slurm_hosts: Any
) -> None:
    from testbed.slurm import jobs

    from .scenarios import expect_stop_leaves_nothing, magic_cluster

    flags = "--launcher slurm --nodes 2 --time 10 --partition test"
    with magic_cluster(shell, slurm_hosts, flags) as cluster:
        _scale(shell, 3)
        before = jobs(slurm_hosts.slurm_conf)
        assert len(before) == 2
        with capture_output():
            shell.run_line_magic("dist_cluster", "restart")
        assert cluster.state.value == "ready"
        # Three ranks again, on the same hosts, and the jobs of before are gone.
        wait_for(
            "the jobs of before leave the queue",
            lambda: not set(before) & set(jobs(slurm_hosts.slurm_conf)),
            20,
        )
        assert sorted(r.host for r in cluster.ranks) == ["h1", "h1", "h2"]
        assert [r.rank for r in cluster.ranks] == [0, 1, 2]
        _expect_ddp(shell, 3)
        expect_stop_leaves_nothing(cluster)
        wait_for("no job left", lambda: not jobs(slurm_hosts.slurm_conf), 20)
