"""--launcher ray without a Ray cluster: its flags, its placement arithmetic, Ray's reasons.

The flags' mistakes are refused before anything starts, each naming the fix; the bundles,
the fail-fast shortfall and each bundle's (node, local rank) are pure functions of what
``ray.nodes()`` and ``placement_group_table`` say (here as Ray 2.60 writes them); the
real head is in tests/onray.
"""

from __future__ import annotations

import re
import signal
from types import SimpleNamespace
from typing import Any

import pytest
from IPython.core.error import UsageError

from dist_notebook.cluster import ClusterConfigError, ClusterSpec
from dist_notebook.cluster.rayengines import placement
from dist_notebook.cluster.rayengines.reasons import actor_died, engine_exit
from dist_notebook.magics.cluster_magics import ClusterMagics, build_spec


def flags(**given: Any) -> SimpleNamespace:
    """The flags of ``%dist_cluster start`` with their defaults, some of them changed."""
    values = vars(ClusterMagics.dist_cluster.parser.parse_args(["start"]))
    values.update(given)
    return SimpleNamespace(**values)


def node(node_id: str, address: str, cpus: float, gpus: float = 0, alive: bool = True) -> dict:
    resources = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    return {
        "NodeID": node_id,
        "NodeManagerAddress": address,
        "Alive": alive,
        "Resources": resources,
    }


# --- flags ---------------------------------------------------------------------------


def test_ray_flags_make_the_spec() -> None:
    spec = build_spec(
        flags(launcher="ray", n=4, gpus_per_rank=1, placement="spread", address="h:6379"),
        gpus_here=[],
    )
    assert (spec.n, spec.gpus_per_rank, spec.ray_placement, spec.ray_address) == (
        4,
        1,
        "spread",
        "h:6379",
    )
    assert spec.resolved_backend == "nccl"
    cpu = build_spec(flags(launcher="ray", cpu=True), gpus_here=[0, 1])
    assert (cpu.n, cpu.gpus_per_rank, cpu.resolved_backend) == (2, 0, "gloo")


@pytest.mark.parametrize(
    ("given", "fix"),
    [
        ({"gpus": [0]}, "with --launcher ray use --gpus-per-rank K"),
        ({"hosts": "h1:2"}, "--hosts is not for --launcher ray: Ray places the ranks (-n N)"),
        ({"nodes": 2}, "--nodes is not for --launcher ray"),
        ({"cpu": True, "gpus_per_rank": 1}, "give --cpu or --gpus-per-rank K, not both"),
    ],
)
def test_ray_flag_mistakes_name_the_fix(given: dict, fix: str) -> None:
    with pytest.raises(UsageError, match=re.escape(fix)):
        build_spec(flags(launcher="ray", **given), gpus_here=[0])


@pytest.mark.parametrize(
    ("given", "flag"),
    [
        ({"address": "h:6379"}, "--address"),
        ({"gpus_per_rank": 1}, "--gpus-per-rank"),
        ({"placement": "pack"}, "--pack/--spread"),
    ],
)
def test_ray_flags_without_launcher_ray_are_refused(given: dict, flag: str) -> None:
    for launcher in ("local", "slurm"):
        with pytest.raises(UsageError, match=re.escape(f"{flag} is an option of Ray clusters")):
            build_spec(flags(launcher=launcher, **given), gpus_here=[])


def test_spec_checks_of_ray_clusters() -> None:
    with pytest.raises(ClusterConfigError, match="with --launcher ray use --gpus-per-rank K"):
        ClusterSpec(launcher="ray", n=1, gpus=(0,))
    with pytest.raises(ClusterConfigError, match="placement must be pack or spread"):
        ClusterSpec(launcher="ray", ray_placement="strict")
    with pytest.raises(ClusterConfigError, match="is a Slurm option"):
        ClusterSpec(launcher="ray", partition="gpu")
    # The API's Ray fields outside --launcher ray (the magic refuses its flags earlier).
    for launcher in ("local", "ssh", "slurm"):
        for given, field in (
            ({"ray_address": "127.0.0.1:6379"}, "ray_address= (--address)"),
            ({"gpus_per_rank": 1}, "gpus_per_rank= (--gpus-per-rank)"),
            ({"ray_placement": "spread"}, "ray_placement= (--pack/--spread)"),
            ({"cpus_per_rank": 2.0}, "cpus_per_rank= (CPUs per rank)"),
        ):
            message = f"{field} is an option of Ray clusters: add launcher='ray'"
            with pytest.raises(ClusterConfigError, match=re.escape(message)):
                ClusterSpec(launcher=launcher, hosts=(("h", 2),), **given)  # type: ignore[arg-type]
    spec = ClusterSpec(launcher="ray", n=2)
    assert spec.engines.scale_refusal(spec, 2, 4, None) is None  # scale N: Ray places them
    refusal = spec.engines.scale_refusal(spec, 2, 4, "h1:2,h2:2")
    assert refusal is not None and "give the number of ranks only (scale N)" in refusal
    # A rank's threads after a scale: its bundle's CPUs, or --threads.
    assert spec.engines.threads(spec) == 1
    assert spec.engines.threads(ClusterSpec(launcher="ray", cpus_per_rank=3)) == 3
    assert spec.engines.threads(ClusterSpec(launcher="ray", cpus_per_rank=3, threads=2)) == 2


# --- placement -------------------------------------------------------------------------


def test_bundles_hold_each_ranks_cpus_and_gpus() -> None:
    assert placement.bundles(2, 1, 0) == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert placement.bundles(1, 4, 2) == [{"CPU": 4.0, "GPU": 2.0}]


def test_shortfall_says_why_ray_could_never_hold_the_ranks() -> None:
    two = [node("a", "10.0.0.1", 4, 2), node("b", "10.0.0.2", 4, 2)]
    gpu = placement.bundles(4, 1, 1)
    assert placement.shortfall(gpu, "SPREAD", two) == ""
    assert placement.shortfall(gpu, "PACK", two) == ""
    assert placement.shortfall(gpu, "STRICT_PACK", two) == (
        "no Ray node has the 4 CPU, 4 GPU of all 4 ranks (--pack)"
    )
    assert placement.shortfall(placement.bundles(5, 1, 1), "SPREAD", two) == (
        "the Ray cluster's nodes do not have the 5 CPU, 5 GPU of 5 ranks"
    )
    assert placement.shortfall(placement.bundles(1, 1, 3), "PACK", two) == (
        "no Ray node has the 1 CPU, 3 GPU of one rank"
    )
    # A dead node holds nothing.
    dead = [node("a", "10.0.0.1", 4), node("b", "10.0.0.2", 4, alive=False)]
    assert "do not have the 5 CPU" in placement.shortfall(placement.bundles(5, 1, 0), "PACK", dead)


def test_ranks_are_ordered_by_node_then_local_rank() -> None:
    nodes = [node("A", "10.0.0.1", 4), node("B", "10.0.0.2", 4)]
    # SPREAD over two nodes: bundles 0 and 2 on B, 1 and 3 on A.
    places = placement.bundle_places({0: "B", 1: "A", 2: "B", 3: "A"}, nodes)
    assert [(p.bundle, p.node, p.local_rank, p.local_size, p.address) for p in places] == [
        (0, 0, 0, 2, "10.0.0.2"),
        (1, 1, 0, 2, "10.0.0.1"),
        (2, 0, 1, 2, "10.0.0.2"),
        (3, 1, 1, 2, "10.0.0.1"),
    ]


def test_a_loopback_controller_is_refused_for_nodes_elsewhere() -> None:
    here = {"127.0.0.1", "192.168.1.5"}
    local = [node("A", "127.0.0.1", 4), node("B", "192.168.1.5", 4)]
    assert placement.unreachable("127.0.0.1", local, here) == ""
    far = [*local, node("C", "192.168.1.9", 4)]
    assert placement.unreachable("127.0.0.1", far, here) == "192.168.1.9"
    assert placement.unreachable("192.168.1.5", far, here) == ""
    assert placement.unreachable("127.0.0.1", [node("C", "10.1.1.1", 4, alive=False)], here) == ""


# --- Ray's reasons ---------------------------------------------------------------------


class _ActorDied(Exception):
    def __init__(self, error_msg: str) -> None:
        super().__init__(error_msg)
        self.error_msg = error_msg


def test_actor_died_keeps_rays_reason_without_its_banner() -> None:
    text = (
        "The actor died unexpectedly before finishing this task.\n"
        "\tclass_name: RankActor\n\tactor_id: 1f2e\n\tpid: 123\n"
        "The actor is dead because its worker process has died. Worker exit type: "
        "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error"
    )
    assert actor_died(_ActorDied(text)) == (
        "The actor is dead because its worker process has died. Worker exit type: "
        "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error"
    )
    assert len(actor_died(_ActorDied("x" * 1000))) == 300


def test_engine_exit_names_the_signal() -> None:
    assert engine_exit(-signal.SIGKILL) == "signal SIGKILL"
    assert engine_exit(3) == "exit code 3"
    assert engine_exit(-99) == "signal 99"
