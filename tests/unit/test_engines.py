"""Engines strategies (dist_notebook/cluster/engines): what differs by launcher.

The factory gives one strategy per launcher ``ClusterSpec`` accepts, each strategy
answers for its launcher alone, and no module outside the strategies branches on a
launcher's name.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from dist_notebook import envvars
from dist_notebook.cluster import engines
from dist_notebook.cluster.engines import strategy_for
from dist_notebook.cluster.spec import LAUNCHERS, ClusterConfigError, ClusterSpec
from dist_notebook.cluster.sync import SyncError

ROOT = Path(engines.__file__).resolve().parents[3]
BRANCH = re.compile(r"launcher *(==|in|!=) *['\"(]|\.launcher *(==|in|!=)")


def _spec(launcher: str, **kw: object) -> ClusterSpec:
    if launcher in ("ssh", "mpi"):
        kw.setdefault("hosts", (("h1", 2), ("h2", 1)))
        kw.setdefault("n", 3)
    return ClusterSpec(launcher=launcher, ip="10.0.0.1", **kw)  # type: ignore[arg-type]


def test_one_strategy_per_launcher_the_spec_accepts() -> None:
    assert set(LAUNCHERS) == set(engines.STRATEGIES) == {"local", "ssh", "mpi", "slurm", "ray"}
    for name in LAUNCHERS:
        assert strategy_for(name).name == name
        assert _spec(name).engines is strategy_for(name)
    with pytest.raises(ClusterConfigError, match="--launcher must be one of"):
        ClusterSpec(launcher="pbs")


def test_no_module_but_the_strategies_branches_on_a_launcher_name() -> None:
    branches = []
    for path in sorted((ROOT / "dist_notebook").rglob("*.py")):
        if "engines" in path.relative_to(ROOT).parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if BRANCH.search(line):
                branches.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not branches, "ask spec.engines instead:\n" + "\n".join(branches)


def test_only_local_ranks_are_processes_of_this_machine() -> None:
    assert [n for n in LAUNCHERS if strategy_for(n).on_this_machine] == ["local"]
    assert strategy_for("local").stacks_refusal() is None
    for name in ("ssh", "mpi", "slurm"):
        assert f"--launcher {name} run on other hosts" in (
            strategy_for(name).stacks_refusal() or ""
        )


def test_local_engines_watch_the_kernel_and_count_the_cores() -> None:
    spec = ClusterSpec(n=2)
    env = spec.engines.engine_env(spec, {"A": "1"})
    assert env == {"A": "1", envvars.PARENT_PID: str(os.getpid())}
    assert spec.engines.ranks_per_host(spec) == 2
    assert spec.engines.engine_args(spec) == ["--IPEngine.enable_nanny=False"]
    assert spec.engines.sync_hosts(spec) == []


def test_remote_engines_lose_what_only_this_machine_has() -> None:
    base = {envvars.PARENT_PID: "1", envvars.STACK_DIR: "/x", "LOCAL_WORLD_SIZE": "2"}
    for name in ("ssh", "mpi", "slurm"):
        spec = _spec(name)
        env = spec.engines.engine_env(spec, dict(base))
        assert envvars.PARENT_PID not in env and envvars.STACK_DIR not in env
        assert env[envvars.CONTROLLER_IP] == "10.0.0.1"
        assert spec.engines.ranks_per_host(spec) == 1
        assert spec.engines.engine_args(spec) == []


def test_ssh_scale_adds_one_set_naming_every_host() -> None:
    spec = _spec("ssh")
    starts = spec.engines.scale_starts(spec, 2, {"h1": 3, "h2": 1, "h3": 1}, {"h1": 2, "h2": 1}, {})
    assert starts == [
        (
            2,
            {},
            {
                "engines": {"h1": 1, "h3": 1},
                "hosts": ["h1", "h2", "h3"],
                "first_local": {"h1": 2, "h3": 0},
                "local_sizes": {"h1": 3, "h3": 1},
            },
        )
    ]


def test_mpi_scale_adds_one_mpiexec_per_growing_host() -> None:
    spec = _spec("mpi")
    starts = spec.engines.scale_starts(spec, 3, {"h1": 4, "h2": 2}, {"h1": 2, "h2": 1}, {"B": "b"})
    assert [
        (count, env[envvars.HOST_NAME], env[envvars.LOCAL_OFFSET]) for count, env, _ in starts
    ] == [
        (2, "h1", "2"),
        (1, "h2", "1"),
    ]
    assert all(env["B"] == "b" for _, env, _ in starts)
    assert "h1:2" in starts[0][2]["mpi_args"]


def test_slurm_scale_submits_a_job_of_whole_nodes() -> None:
    spec = _spec("slurm", n=4, nodes=2, gpus_per_node=2)
    assert "add a multiple of 2 ranks" in (spec.engines.scale_refusal(spec, 4, 5, None) or "")
    assert spec.engines.scale_refusal(spec, 4, 6, None) is None
    assert "scale --hosts is for --launcher ssh or mpi" in (
        spec.engines.scale_refusal(spec, 4, 6, "h1:2") or ""
    )
    [(count, _, traits)] = spec.engines.scale_starts(spec, 4, {}, {}, {})
    assert count == 4 and traits["namespace"]["nodes"] == 2


def test_slurm_takes_its_own_options_and_refuses_sync() -> None:
    with pytest.raises(ClusterConfigError, match="is a Slurm option"):
        ClusterSpec(n=2, nodes=2)
    with pytest.raises(ClusterConfigError, match="do not split evenly over --nodes 2"):
        _spec("slurm", n=3, nodes=2)
    with pytest.raises(ClusterConfigError, match="is not a Slurm time"):
        _spec("slurm", time_limit="soon")
    with pytest.raises(SyncError, match="Slurm cluster's nodes"):
        spec = _spec("slurm")
        spec.engines.sync_hosts(spec)


def test_hosts_are_for_ssh_and_mpi_only() -> None:
    for name in ("local", "slurm"):
        with pytest.raises(ClusterConfigError, match="--hosts is for --launcher ssh or mpi"):
            ClusterSpec(launcher=name, hosts=(("h1", 2),))
    with pytest.raises(ClusterConfigError, match="--launcher mpi needs --hosts"):
        ClusterSpec(launcher="mpi")
    assert _spec("ssh").engines.sync_hosts(_spec("ssh")) == ["h1", "h2"]
