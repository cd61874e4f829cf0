"""ClusterSpec: every invalid request is refused with a message that names the fix."""

from __future__ import annotations

import dataclasses
import os
import re

import pytest

from dist_notebook.cluster import ClusterConfigError, ClusterSpec


@pytest.mark.parametrize(
    ("kwargs", "fix"),
    [
        ({"n": 0}, "1 or more"),
        ({"n": -1}, "1 or more"),
        ({"n": "2"}, "whole number"),
        ({"n": 3, "gpus": (0, 1)}, "one GPU per rank, e.g. --gpus 0,1,2"),
        ({"n": 2, "gpus": (1, 1)}, "lists a GPU twice"),
        ({"backend": "mpi"}, "one of auto, nccl, gloo"),
        ({"backend": "nccl"}, "use --backend gloo"),
        ({"timeout": 0}, "positive number of seconds"),
        ({"timeout": -3.0}, "positive number of seconds"),
        ({"threads": 0}, "1 or more"),
        ({"launcher": "pbs"}, "one of local, mpi, ssh, slurm"),
    ],
)
def test_invalid_spec_names_the_fix(kwargs: dict, fix: str) -> None:
    with pytest.raises(ClusterConfigError, match=re.escape(fix)):
        ClusterSpec(**kwargs)


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        ClusterSpec(n=0)


def test_defaults_are_two_cpu_ranks_on_gloo() -> None:
    spec = ClusterSpec()
    assert spec.n == 2
    assert spec.gpus == ()
    assert spec.resolved_backend == "gloo"
    assert spec.ip == "127.0.0.1"


def test_auto_backend_is_nccl_with_one_gpu_per_rank() -> None:
    assert ClusterSpec(n=2, gpus=(0, 1)).resolved_backend == "nccl"
    assert ClusterSpec(n=2, gpus=(0, 1), backend="gloo").resolved_backend == "gloo"


def test_threads_default_to_cores_per_local_rank() -> None:
    cores = os.cpu_count() or 1
    assert ClusterSpec(n=2).resolved_threads == max(1, cores // 2)
    assert ClusterSpec(n=4 * cores).resolved_threads == 1
    assert ClusterSpec(n=2, threads=3).resolved_threads == 3
    # Engines on other hosts (one per host) keep every core of their host.
    assert ClusterSpec(n=2, launcher="slurm").resolved_threads == cores


def test_spec_is_frozen() -> None:
    spec = ClusterSpec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.n = 3  # type: ignore[misc]
