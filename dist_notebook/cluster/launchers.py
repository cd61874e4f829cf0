"""ipyparallel launchers that start our entry points and give each engine its rank.

The local launcher is ipyparallel's, with two changes: the command is our boot module
(rank environment, parent watch, early torch import, then ipyparallel's engine) and each
engine's environment carries its rank, so the rank is known before torch is imported.
MPI, SSH and Slurm engines use ipyparallel's launchers with our command; their ranks
come from the launcher's own variables (see ``dist_notebook.engine.rankenv``).
"""

from __future__ import annotations

import os
import sys

from ipyparallel import Cluster
from ipyparallel.cluster.launcher import (
    LocalControllerLauncher,
    LocalEngineLauncher,
    LocalEngineSetLauncher,
)
from traitlets import List

from ..engine.parent import ENV_VAR as PARENT_ENV

ENGINE_CMD = [sys.executable, "-m", "dist_notebook.engine.boot"]
CONTROLLER_CMD = [sys.executable, "-m", "dist_notebook.cluster.controller_boot"]

# ipyparallel's entry-point names for the launchers beyond one machine.
REMOTE_ENGINE_LAUNCHERS = {"mpi": "mpi", "ssh": "ssh", "slurm": "slurm"}


class RankEngineLauncher(LocalEngineLauncher):
    """One local engine whose environment names its rank.

    Engine ``i`` of a set gets rank ``DIST_NOTEBOOK_RANK_OFFSET + i`` (the offset lets a
    single replacement engine take the rank of the one it replaces).
    """

    engine_cmd = List(list(ENGINE_CMD), config=True)

    def get_env(self) -> dict:
        env = super().get_env()
        rank = int(self.identifier) + int(env.get("DIST_NOTEBOOK_RANK_OFFSET", "0"))
        env["DIST_NOTEBOOK_RANK"] = str(rank)
        env["DIST_NOTEBOOK_LOCAL_RANK"] = str(rank)
        return env


class RankEngineSetLauncher(LocalEngineSetLauncher):
    """A set of local engines started at once (no delay: ranks come from the env)."""

    launcher_class = RankEngineLauncher
    engine_cmd = List(list(ENGINE_CMD), config=True)
    delay = 0.0


class OurControllerLauncher(LocalControllerLauncher):
    """The local controller, told which process is its parent so it can watch it."""

    controller_cmd = List(list(CONTROLLER_CMD), config=True)

    def get_env(self) -> dict:
        env = super().get_env()
        # The launcher runs in the kernel, which is the controller's parent: without
        # this the controller would outlive a killed kernel.
        env[PARENT_ENV] = str(os.getpid())
        return env


class PrivateCluster(Cluster):
    """ipyparallel's Cluster, with its cluster file readable by the owner only.

    ipyparallel writes ``security/cluster-*.json`` (pids, log paths, launcher state)
    with the default umask, i.e. world-readable; its connection files are 0600 already.
    """

    def write_cluster_file(self) -> None:
        if self.cluster_file:
            os.makedirs(os.path.dirname(self.cluster_file), mode=0o700, exist_ok=True)
            # Created 0600 before ipyparallel opens it: an existing file keeps its mode.
            os.close(os.open(self.cluster_file, os.O_CREAT | os.O_WRONLY, 0o600))
            os.chmod(self.cluster_file, 0o600)
        super().write_cluster_file()
