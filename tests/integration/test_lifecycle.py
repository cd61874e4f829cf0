"""Start, restart and stop a cluster of its own: fresh engines, and no process left over."""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Iterator

import pytest

from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.cluster import ClusterState
from dist_notebook.cluster.onranks.execute import run_on_ranks
from dist_notebook.cluster.spec import ClusterConfigError

from .procs import alive, cluster_pids, kill_all, wait_gone

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def fresh() -> Iterator[DistCluster]:
    cluster = DistCluster(ClusterSpec(n=2))
    cluster.start_sync()
    pids = cluster_pids(cluster)
    yield cluster
    cluster.stop_sync()
    kill_all(wait_gone(pids["engines"] + pids["controller"], 10))


def group_sum(cluster: DistCluster) -> list[float]:
    outputs = run_on_ranks(
        cluster, "t = torch.tensor([float(rank + 1)])\ndist.all_reduce(t)\nt.item()"
    )
    return [float(o.result["data"]["text/plain"]) for o in outputs if o.result]


def test_start_gives_ranks_with_live_engines(fresh: DistCluster) -> None:
    assert fresh.state == ClusterState.READY
    assert [r.rank for r in fresh.ranks] == [0, 1]
    assert all(r.backend == "gloo" and r.device == "cpu" for r in fresh.ranks)
    pids = cluster_pids(fresh)
    assert all(alive(p) for p in pids["engines"] + pids["controller"])
    # Engines leave by themselves when the controller's heartbeats stop (the engines'
    # own arguments: a forked engine's command line is its fork server's).
    told = run_on_ranks(fresh, "import sys\n'--IPEngine.max_heartbeat_misses=10' in sys.argv")
    assert [o.result["data"]["text/plain"] for o in told if o.result] == ["True", "True"]
    assert group_sum(fresh) == [3.0, 3.0]


def test_the_client_file_lets_another_client_run_on_the_engines(fresh: DistCluster) -> None:
    """What a kernel attached to a detached cluster opens (the keeper's file names it)."""
    import ipyparallel as ipp

    assert DistCluster(ClusterSpec(n=2)).client_file == ""  # not started: no file yet
    path = fresh.client_file
    assert os.path.isfile(path) and path.startswith(fresh.profile_dir + os.sep), path
    other = ipp.Client(path)
    try:
        other.wait_for_engines(fresh.n, timeout=30)
        engines = fresh.engine_ids()
        assert sorted(other.ids) == sorted(engines)
        assert other[engines].apply_sync(os.getpid) == [r.pid for r in fresh.ranks]
    finally:
        other.close()


def test_restart_gives_new_engines_with_the_same_ranks(fresh: DistCluster) -> None:
    old = {r.rank: r.pid for r in fresh.ranks}
    run_on_ranks(fresh, "kept = 1")
    fresh.restart_sync()
    assert fresh.state == ClusterState.READY
    new = {r.rank: r.pid for r in fresh.ranks}
    assert sorted(new) == [0, 1]
    assert not set(new.values()) & set(old.values())
    assert wait_gone(old.values(), 10) == []
    assert group_sum(fresh) == [3.0, 3.0]
    # New processes: the old namespace is gone.
    outputs = run_on_ranks(fresh, "'kept' in globals()")
    assert [o.result["data"]["text/plain"] for o in outputs if o.result] == ["False", "False"]


def test_stop_leaves_no_process(fresh: DistCluster) -> None:
    pids = cluster_pids(fresh)
    stacks = fresh.stack_dir
    assert os.path.isdir(stacks)
    fresh.stop_sync()
    assert fresh.state == ClusterState.STOPPED
    assert wait_gone(pids["engines"] + pids["controller"], 10) == []
    assert not os.path.exists(stacks)
    fresh.stop_sync()  # a second stop does nothing
    assert fresh.state == ClusterState.STOPPED


def _stack_dirs(cluster: DistCluster) -> list[str]:
    return glob.glob(os.path.join(tempfile.gettempdir(), f"dist-notebook-{cluster.id}-*"))


def test_a_refused_or_never_started_cluster_leaves_no_folder() -> None:
    never = DistCluster(ClusterSpec(n=2))
    never.stop_sync()
    refused = DistCluster(ClusterSpec(n=100_000))
    with pytest.raises(ClusterConfigError):
        refused.start_sync()
    refused.stop_sync()
    assert _stack_dirs(never) + _stack_dirs(refused) == []
