"""Ranks across hosts from the engines' probes, and each engine's boot-time place."""

from __future__ import annotations

from typing import Any

import pytest

from dist_notebook.cluster.launchers import RankSlurmEngineSetLauncher, remote_engines
from dist_notebook.cluster.placement import place
from dist_notebook.cluster.spec import ClusterSpec
from dist_notebook.engine.rankenv import apply_rank_environment


def probe(host: str, local: int | None, node: int | None = None, hint: int | None = None) -> dict:
    return {
        "host": host,
        "address": f"10.0.0.{host[-1]}",
        "interface": "eth0",
        "pid": 100 + (local or 0),
        "node": node,
        "rank_hint": hint,
        "local_rank": local,
        "local_size": None,
        "devices": None,
    }


def test_ranks_by_node_then_local_rank_whatever_the_registration_order() -> None:
    # Registered as h2/1, h1/0, h2/0, h1/1 (engine ids 10..13); SSH gives node ids.
    probes = [probe("h2", 1, 1), probe("h1", 0, 0), probe("h2", 0, 1), probe("h1", 1, 0)]
    places = place([10, 11, 12, 13], probes)
    got = [(p.rank, p.engine_id, p.host, p.node_rank, p.local_rank) for p in places]
    assert got == [
        (0, 11, "h1", 0, 0),
        (1, 13, "h1", 0, 1),
        (2, 12, "h2", 1, 0),
        (3, 10, "h2", 1, 1),
    ]
    assert {p.master_addr for p in places} == {"10.0.0.1"}
    assert {(p.world_size, p.local_world_size) for p in places} == {(4, 2)}


def test_mpi_nodes_follow_the_lowest_launcher_rank() -> None:
    probes = [probe("h2", 0, hint=2), probe("h1", 1, hint=1), probe("h1", 0, hint=0)]
    places = place([0, 1, 2], probes)
    assert [(p.rank, p.host, p.local_rank) for p in places] == [
        (0, "h1", 0),
        (1, "h1", 1),
        (2, "h2", 0),
    ]


# What each launcher's variables give at boot: the engine's environment, then what
# apply_rank_environment must have set in it.
SLURM_ENV = {
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "8",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "DIST_NOTEBOOK_GPUS_PER_NODE": "4",
    "CUDA_VISIBLE_DEVICES": "4,5,6,7",
}
BOOT_ENVIRONMENTS = {
    # One GPU: this local rank's of the job's.
    "slurm": (
        SLURM_ENV,
        {
            "RANK": "5",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "8",
            "LOCAL_WORLD_SIZE": "4",
            "CUDA_VISIBLE_DEVICES": "5",
        },
    ),
    "open-mpi": (
        {
            "OMPI_COMM_WORLD_RANK": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
            "OMPI_COMM_WORLD_SIZE": "3",
            "DIST_NOTEBOOK_CPU": "1",
        },
        {"RANK": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "CUDA_VISIBLE_DEVICES": ""},
    ),
    # An mpiexec that scale adds numbers its local ranks (and GPUs) after the host's.
    "mpiexec-added-by-scale": (
        {
            "OMPI_COMM_WORLD_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "DIST_NOTEBOOK_LOCAL_OFFSET": "2",
            "DIST_NOTEBOOK_LOCAL_SIZE": "3",
            "DIST_NOTEBOOK_GPUS_PER_NODE": "4",
        },
        {"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "3", "CUDA_VISIBLE_DEVICES": "2"},
    ),
}


@pytest.mark.parametrize("launcher", list(BOOT_ENVIRONMENTS))
def test_boot_environment_from_the_launchers_variables(launcher: str) -> None:
    given, expected = BOOT_ENVIRONMENTS[launcher]
    env = dict(given)
    apply_rank_environment(env)
    assert {name: env.get(name) for name in expected} == expected
    assert int(env["OMP_NUM_THREADS"]) >= 1


def test_a_slurm_rank_reports_its_gpu(monkeypatch: Any) -> None:
    from dist_notebook.engine import group

    env = dict(SLURM_ENV)
    apply_rank_environment(env)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert group.rank_info()["device"] == "cuda:5"


def test_slurm_job_asks_for_nodes_gpus_partition_time_account() -> None:
    spec = ClusterSpec(
        n=8,
        launcher="slurm",
        nodes=2,
        gpus_per_node=4,
        partition="gpu",
        time_limit="1:00:00",
        account="proj",
        ip="10.0.0.1",
    )
    cls, config = remote_engines(spec)
    assert cls is RankSlurmEngineSetLauncher
    launcher = cls(config=_config(config), profile_dir="/tmp", cluster_id="x")
    launcher.write_batch_script(8)
    script = open(launcher.batch_file).read()
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=1:00:00",
        "#SBATCH --account=proj",
        "dist_notebook.boot.engine",
    ):
        assert line in script, script


def _config(d: dict) -> Any:
    from traitlets.config import Config

    return Config(d)


def test_after_a_scale_hosts_and_kept_engines_keep_their_order() -> None:
    # Before: h2 was node 0 (the Slurm job's node id 0), h1 node 1. The new job's node
    # ids (h1: 0, h2: 1) say nothing about the old ones; its local ranks start at 0.
    probes = [
        probe("h2", 0, 0, hint=0),
        probe("h1", 0, 1, hint=1),
        probe("h1", 0, 0),  # new, engine 12
        probe("h2", 0, 1),  # new, engine 13
    ]
    places = place([10, 11, 12, 13], probes, previous=["h2", "h1"], kept={10, 11})
    got = [(p.engine_id, p.host, p.node_rank, p.local_rank) for p in places]
    assert got == [(10, "h2", 0, 0), (13, "h2", 0, 1), (11, "h1", 1, 0), (12, "h1", 1, 1)]


def test_scale_layout_fills_the_least_and_empties_the_most_loaded_host() -> None:
    from dist_notebook.cluster.scale import ScaleError, layout

    assert layout({"h1": 1, "h2": 1}, 3) == {"h1": 2, "h2": 1}  # a tie: the first
    assert layout({"h1": 2, "h2": 1}, 5) == {"h1": 3, "h2": 2}
    assert layout({"h1": 2, "h2": 2}, 3) == {"h1": 2, "h2": 1}  # a tie: the last
    assert layout({"h1": 3, "h2": 1}, 2) == {"h1": 1, "h2": 1}
    assert layout({"h1": 0, "h2": 1}, 2) == {"h1": 1, "h2": 1}  # an emptied host refills
    try:
        layout({"h1": 2, "h2": 2}, 5, cap=2)
    except ScaleError as e:
        assert "2 GPUs each" in str(e) and "scale --hosts" in str(e)
    else:
        raise AssertionError("a layout beyond the GPUs per node must fail")


def test_a_job_that_scale_adds_spreads_its_ranks() -> None:
    from dist_notebook.cluster.launchers import slurm_namespace

    assert slurm_namespace(2, 2)["tasks_line"] == "#SBATCH --ntasks-per-node=1"
    odd = slurm_namespace(3, 2, 4)
    assert (odd["nodes"], odd["tasks_line"], odd["gpu_line"]) == (
        2,
        "",
        "#SBATCH --gpus-per-node=4",
    )
    assert slurm_namespace(1, 4)["nodes"] == 1
