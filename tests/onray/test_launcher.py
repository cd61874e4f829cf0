"""``%dist_cluster start --launcher ray`` on a real Ray head (loopback, 4 CPUs).

Two CPU ranks, each the child process of a Ray actor of our placement group: the ranks
all_reduce, ``%%dist_train`` records every step of both, a rank's actor killed with
SIGKILL (and a rank's engine under a live actor) is named in the notebook within
seconds with Ray's reason and ``restart`` places new actors, and ``stop`` leaves no
actor or placement group of ours in Ray's state API. A start that Ray cannot place
says so at once, with what is free.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from conftest import session_of
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output
from ranklines import printed_by

from dist_notebook import load_run
from testbed.cells import TRAIN_CELL

from . import raystate
from .raystate import actor_pids, ours

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# A dead rank fails the cell once its peers are out of their collective, at most 10 s
# after its death is known (cluster/onranks/execute.py): under two CPU hogs an engine's
# SIGKILL was named after 11.2 s, its peers' gloo reset being late.
NAMED_WITHIN_S = 15.0


def _wait_for(what: str, ok: Callable[[], Any], timeout: float) -> float:
    t0 = time.monotonic()
    while not ok():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(0.1)
    return time.monotonic() - t0


def all_reduce_ok(shell: Any, n: int) -> None:
    with capture_output() as cap:
        shell.run_cell_magic("dist", "", "x = torch.ones(1); dist.all_reduce(x); print(x.item())")
    assert printed_by(cap.stdout, f"{float(n)}") == set(range(n)), cap.stdout


@pytest.fixture(scope="module")
def ray_cluster(shell: Any, ray_head: str) -> Iterator[Any]:
    with raystate.ray_cluster(shell, ray_head, "--spread") as cluster:
        yield cluster


def test_each_rank_is_a_ray_actors_process_and_all_reduce_works(
    shell: Any, ray_cluster: Any
) -> None:
    pids = actor_pids(ray_cluster)
    assert len(pids) == 2, pids
    for r in ray_cluster.ranks:
        assert psutil.Process(r.pid).ppid() in pids.values(), (r, pids)
    assert [r.rank for r in ray_cluster.ranks] == [0, 1]
    all_reduce_ok(shell, 2)
    with capture_output() as cap:
        shell.run_cell_magic(
            "dist", "", "import os; print(os.environ['LOCAL_RANK'], os.environ['NODE_RANK'])"
        )
    # One Ray node: node rank 0, local ranks by bundle.
    assert printed_by(cap.stdout, "0 0") == {0} and printed_by(cap.stdout, "1 0") == {1}


def test_dist_train_records_every_rank(shell: Any, ray_cluster: Any) -> None:
    magics = shell.magics_manager.registry["TrainMagics"]
    with capture_output():
        shell.run_cell_magic("dist_train", "--name ray-ddp --steps 20", TRAIN_CELL.format(steps=20))
    assert magics.last_result.state.value == "succeeded"
    records = load_run("ray-ddp").records()
    steps = {r: sorted(rec.step for rec in records if rec.rank == r) for r in range(2)}
    assert steps == {0: list(range(20)), 1: list(range(20))}


LOOP_CELL = """
import time
for _ in range(600):
    x = torch.ones(1); dist.all_reduce(x); time.sleep(0.05)
"""


def _kill_mid_cell(shell: Any, pid: int) -> tuple[str, float]:
    """Run a cell of all_reduces, SIGKILL *pid* once it runs: the cell's error, and the
    seconds from the kill to the cell's end."""
    killed: list[float] = []

    def kill() -> None:
        time.sleep(3.0)
        killed.append(time.monotonic())
        os.kill(pid, signal.SIGKILL)

    threading.Thread(target=kill, daemon=True).start()
    with capture_output():
        result = shell.run_cell("%%dist\n" + LOOP_CELL)
    assert killed, "the cell ended before the kill"
    return str(result.error_in_exec), time.monotonic() - killed[0]


def test_killed_actor_is_named_with_rays_reason_then_restart(shell: Any, ray_cluster: Any) -> None:
    rank1 = ray_cluster.ranks[1]
    actor = psutil.Process(rank1.pid).ppid()
    error, took = _kill_mid_cell(shell, actor)
    print(f"actor kill named in {took:.2f} s")
    assert "rank 1 (" in error and "died: its Ray actor died" in error, error
    assert took < NAMED_WITHIN_S, took
    assert "Ray actor died" in ray_cluster.dead_ranks()[1]
    # The actor's child, the engine, ends with it (its parent watch).
    _wait_for("rank 1's engine gone", lambda: not _alive(rank1.pid), NAMED_WITHIN_S)
    with capture_output():
        shell.run_line_magic("dist_cluster", "restart")
    assert ray_cluster.state.value == "ready"
    assert len(actor_pids(ray_cluster)) == 2
    all_reduce_ok(shell, 2)


def test_killed_engine_under_its_actor_is_named(shell: Any, ray_cluster: Any) -> None:
    rank0 = ray_cluster.ranks[0]
    error, took = _kill_mid_cell(shell, rank0.pid)
    print(f"engine kill named in {took:.2f} s")
    assert "rank 0 (" in error and "signal SIGKILL" in error and "Ray actor" in error, error
    assert took < NAMED_WITHIN_S, took
    with capture_output():
        shell.run_line_magic("dist_cluster", "restart")
    assert len(actor_pids(ray_cluster)) == 2
    all_reduce_ok(shell, 2)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_stop_leaves_no_actor_or_placement_group(shell: Any, ray_cluster: Any) -> None:
    assert all(ours(ray_cluster))
    ranks = [r.pid for r in ray_cluster.ranks]
    ray_cluster.stop_sync()
    _wait_for(
        f"nothing of ours in Ray: {ours(ray_cluster)}", lambda: not any(ours(ray_cluster)), 15
    )
    _wait_for("the ranks' processes gone", lambda: not any(map(psutil.pid_exists, ranks)), 15)


def test_unplaceable_start_says_so_at_once_with_what_is_free(shell: Any, ray_head: str) -> None:
    session = session_of(shell)
    saved, session.cluster = session.cluster, None
    t0 = time.monotonic()
    try:
        with pytest.raises(UsageError) as info, capture_output():
            shell.run_line_magic(
                "dist_cluster", f"start -n 5 --cpu --launcher ray --address {ray_head}"
            )
        took = time.monotonic() - t0
        message = str(info.value)
        assert "cannot place 5 ranks of 1 CPU each" in message, message
        assert "free now: CPU 4/4, GPU 0/0" in message, message
        assert "\n" not in message.strip(), message
        assert took < 30, took
        assert not any(ours(None))
    finally:
        session.cluster = saved
        import ray

        if ray.is_initialized():
            ray.shutdown()
