"""What each rank of the shared 2-rank CPU cluster sees, and running cells on a subset."""

from __future__ import annotations

import os
from typing import Any

import pytest

from dist_notebook.cluster.onranks.execute import run_on_ranks

pytestmark = pytest.mark.timeout(60)

ENV_NAMES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
)


def test_rank_environment(shell: Any, cluster2: Any) -> None:
    expression = f"{{k: __import__('os').environ.get(k) for k in {ENV_NAMES!r}}}"
    envs = shell.run_line_magic("dist_pull", f"{expression} --all")
    assert sorted(envs) == [0, 1]
    threads = str(max(1, (os.cpu_count() or 1) // 2))
    for rank, env in envs.items():
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["OMP_NUM_THREADS"] == threads  # 1 on a 2-core machine with 2 ranks
        assert env["CUDA_VISIBLE_DEVICES"] == ""  # --cpu hides every GPU
    ports = {env["MASTER_PORT"] for env in envs.values()}
    assert len(ports) == 1 and int(ports.pop()) > 0


def test_names_every_cell_gets(shell: Any, cluster2: Any) -> None:
    got = shell.run_line_magic(
        "dist_pull",
        "(rank, world_size, local_rank, str(device), dist.get_rank(), dist.get_backend(),"
        " torch.get_num_threads()) --all",
    )
    threads = max(1, (os.cpu_count() or 1) // 2)
    assert got == {r: (r, 2, r, "cpu", r, "gloo", threads) for r in (0, 1)}


def test_rank_info_matches_the_engines(cluster2: Any) -> None:
    outputs = run_on_ranks(cluster2, "import os\nos.getpid()")
    pids = {o.rank: int(o.result["data"]["text/plain"]) for o in outputs if o.result}
    assert pids == {r.rank: r.pid for r in cluster2.ranks}


def test_cell_on_a_subset_of_ranks(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic("dist", "", "only_here = None")
    capsys.readouterr()
    shell.run_cell_magic("dist", "--ranks 1", "only_here = rank\nprint('ran on', rank)")
    out = capsys.readouterr().out
    assert "[rank 1] ran on 1" in out and "[rank 0]" not in out
    assert shell.run_line_magic("dist_pull", "only_here --all") == {0: None, 1: 1}


def test_run_on_ranks_returns_only_the_asked_ranks(cluster2: Any) -> None:
    outputs = run_on_ranks(cluster2, "print(rank)", [1, 0])
    assert [(o.rank, o.stdout) for o in outputs] == [(1, "1\n"), (0, "0\n")]


def test_namespace_persists_between_cells(shell: Any, cluster2: Any) -> None:
    shell.run_cell_magic("dist", "", "counter = rank * 10")
    shell.run_cell_magic("dist", "", "counter += 1")
    assert shell.run_line_magic("dist_pull", "counter --all") == {0: 1, 1: 11}
