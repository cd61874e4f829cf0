"""``%dist_cluster scale N`` between cells, on local engines (no root needed).

Growing adds engines through the launcher and renumbers; shrinking stops the engines of
the highest ranks (their processes are gone); each time the group is new (a fresh store
port), every rank's ``world_size`` follows, and a DDP model built again trains with the
same global batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from conftest import session_of
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

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
    assert out.count("global batch 48 world 3 3") == 3, out
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
    assert out.count("global batch 48 world 2 2") == 2, out
    assert cluster.dead_ranks() == {}


def test_scale_errors_name_the_fix(shell: Any, cluster: Any) -> None:
    with pytest.raises(UsageError, match="needs the new number of ranks, e.g. scale 4"):
        shell.run_line_magic("dist_cluster", "scale")
    with pytest.raises(UsageError, match="must be 1 or more"):
        shell.run_line_magic("dist_cluster", "scale 0")


def _store_port(shell: Any) -> str:
    with capture_output() as cap:
        shell.run_cell_magic("dist", "--ranks 0", "import os; print(os.environ['MASTER_PORT'])")
    return cap.stdout.strip()


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
