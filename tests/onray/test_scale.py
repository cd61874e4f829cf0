"""``%dist_cluster scale N`` with ``--launcher ray`` on the tests' Ray head (loopback, 4
CPUs): a grow places the added ranks in a new placement group, one actor each; a shrink
ends the newest ranks first, each with its actor, and an engine set left with no rank
has its placement group removed; after each, the rank table, the run store and the
ranks' group say N (an all_reduce of N), survivors keep their namespace; a DDP step
works; stop leaves nothing of ours in Ray's state API.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output
from ranklines import printed_by

from . import raystate
from .raystate import ours

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def ray_cluster(shell: Any, ray_head: str) -> Iterator[Any]:
    with raystate.ray_cluster(shell, ray_head) as cluster:
        yield cluster


def _scale(shell: Any, n: int) -> tuple[str, float]:
    t0 = time.perf_counter()
    with capture_output() as cap:
        shell.run_line_magic("dist_cluster", f"scale {n}")
    return cap.stdout, time.perf_counter() - t0


def _all_reduce(shell: Any) -> str:
    with capture_output() as cap:
        shell.run_cell_magic(
            "dist",
            "",
            "x = torch.ones(1); dist.all_reduce(x); print(x.item(), world_size)",
        )
    return cap.stdout


def _stored(cluster: Any) -> tuple[str, int, list[int]]:
    from dist_notebook.store import StoreReader

    reader = StoreReader()
    try:
        row = reader.cluster(cluster.id)
    finally:
        reader.close()
    return row["state"], row["n"], sorted(r["rank"] for r in row["ranks"])


def _says(shell: Any, cluster: Any, n: int) -> None:
    assert [r.rank for r in cluster.ranks] == list(range(n)) and cluster.n == n
    assert cluster.state.value == "ready"
    assert _stored(cluster) == ("ready", n, list(range(n)))
    out = _all_reduce(shell)
    assert printed_by(out, f"{float(n)} {n}") == set(range(n)), out
    assert cluster.dead_ranks() == {}


def test_grow_places_new_actors_in_a_new_placement_group(shell: Any, ray_cluster: Any) -> None:
    with capture_output():
        shell.run_cell_magic("dist", "", "keep = rank * 10")
    actors, groups = ours(ray_cluster)
    assert (len(actors), len(groups)) == (2, 1)
    out, took = _scale(shell, 3)
    assert "3 ranks" in out, out
    _says(shell, ray_cluster, 3)
    actors, groups = ours(ray_cluster)
    assert (len(actors), len(groups)) == (3, 2), (actors, groups)
    engine_pids = {r.pid for r in ray_cluster.ranks}
    actor_pids = {int(a.pid) for a in actors}
    for pid in engine_pids:  # each rank is the child of one of our actors
        assert psutil.Process(pid).ppid() in actor_pids
    with capture_output() as cap:
        shell.run_cell_magic("dist", "", "print(globals().get('keep'))")
    for line in ("[rank 0] 0", "[rank 1] 10", "[rank 2] None"):
        assert line in cap.stdout, cap.stdout
    print(f"\nscale 2 -> 3 on Ray: {took:.1f} s")


def test_shrink_ends_the_newest_ranks_and_their_actors(shell: Any, ray_cluster: Any) -> None:
    leaving = [psutil.Process(r.pid) for r in ray_cluster.ranks if r.rank >= 1]
    out, took = _scale(shell, 1)
    _says(shell, ray_cluster, 1)
    deadline = time.monotonic() + 30
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in leaving):
        assert time.monotonic() < deadline, "the leaving ranks' engines did not exit"
        time.sleep(0.1)
    actors, groups = ours(ray_cluster)
    # The second engine set emptied: its group removed. The first keeps its group (Ray
    # removes a placement group whole) with one live actor.
    assert (len(actors), len(groups)) == (1, 1), (actors, groups)
    assert ray_cluster.dead_ranks() == {}
    print(f"\nscale 3 -> 1 on Ray: {took:.1f} s")


def test_grow_again_then_a_ddp_step(shell: Any, ray_cluster: Any) -> None:
    _scale(shell, 2)
    _says(shell, ray_cluster, 2)
    with capture_output() as cap:
        shell.run_cell_magic(
            "dist",
            "",
            "import torch.nn as nn\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "model = DDP(nn.Linear(4, 1))\n"
            "model(torch.randn(24 // world_size, 4)).sum().backward()\n"
            "print('ddp world', dist.get_world_size())\n",
        )
    assert printed_by(cap.stdout, "ddp world 2") == {0, 1}, cap.stdout


def test_scale_hosts_is_refused(shell: Any, ray_cluster: Any) -> None:
    with pytest.raises(UsageError, match=r"give the number of ranks only \(scale N\)"):
        shell.run_line_magic("dist_cluster", "scale 3 --hosts a:1,b:2")
    assert ray_cluster.n == 2


def test_stop_leaves_nothing_of_ours(shell: Any, ray_cluster: Any, ray_head: str) -> None:
    pids = [r.pid for r in ray_cluster.ranks]
    ray_cluster.stop_sync()
    deadline = time.monotonic() + 15
    while any(ours(ray_cluster, ray_head)) or any(map(psutil.pid_exists, pids)):
        assert time.monotonic() < deadline, ours(ray_cluster, ray_head)
        time.sleep(0.2)
