"""ipyparallel launchers that start our entry points and give each engine its rank.

The local launcher is ipyparallel's, with two changes: the command is our boot module
(rank environment, parent watch, early torch import, then ipyparallel's engine) and each
engine's environment carries its rank, so the rank is known before torch is imported.
MPI, SSH and Slurm engines use ipyparallel's launchers with our command (see
``remote_launchers`` for how a ClusterSpec becomes their configuration); each engine
learns its place on its host from the launcher, and the kernel numbers the ranks
across hosts (``cluster.placement``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ipyparallel import Cluster
from ipyparallel.cluster.launcher import (
    LocalControllerLauncher,
    LocalEngineLauncher,
    LocalEngineSetLauncher,
    MPIEngineSetLauncher,
    SlurmEngineSetLauncher,
    SSHEngineLauncher,
    SSHEngineSetLauncher,
)
from traitlets import Bool, List, Unicode, default

from ..engine.parent import ENV_VAR as PARENT_ENV

ENGINE_CMD = [sys.executable, "-m", "dist_notebook.engine.boot"]
CONTROLLER_CMD = [sys.executable, "-m", "dist_notebook.cluster.controller_boot"]


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


class RankSSHEngineLauncher(SSHEngineLauncher):
    """One engine over ssh, told its node and local rank (identifier ``host/i``)."""

    shared_filesystem = Bool(
        True,
        config=True,
        help="""The hosts see this machine's files at the same paths (home, the venv).

        Then nothing is copied and an engine starts with two ssh round trips; set False
        to copy the connection file to each host (ipyparallel's way).""",
    )
    remote_python = Unicode(sys.executable, config=True, help="Python on the remote hosts")
    engine_cmd = List(list(ENGINE_CMD), config=True)

    @default("to_send")
    def _to_send_default(self) -> list:
        # With a shared filesystem the file is already there: copying it onto itself
        # would truncate it while it is read.
        if self.shared_filesystem:
            return []
        return SSHEngineLauncher._to_send_default(self)  # type: ignore[attr-defined]

    def get_env(self) -> dict:
        env = super().get_env()
        host, _, local = self.identifier.rpartition("/")
        engines = dict(getattr(self.parent, "engines", {}) or {})
        if host in engines:
            env["DIST_NOTEBOOK_NODE"] = str(list(engines).index(host))
            count = engines[host]
            env["DIST_NOTEBOOK_LOCAL_SIZE"] = str(count if isinstance(count, int) else 1)
        env["DIST_NOTEBOOK_LOCAL_RANK"] = local
        return env

    def start(self, hostname=None, user=None, port=None):  # type: ignore[no-untyped-def]
        if not self.shared_filesystem:
            return super().start(hostname=hostname, user=user, port=port)
        # ipyparallel checks python, creates the profile and copies files first (three
        # more ssh round trips per engine); on a shared filesystem none is needed.
        if hostname is not None:
            self.hostname = hostname
        if user is not None:
            self.user = user
        if port is not None and "-p" not in self.ssh_args:
            self.ssh_args += ["-p", str(port)]
        self.pid = self.ssh_sender.cmd_start(
            self.program + self.program_args,
            env=self.get_env(),
            output_file=self.remote_output_file,
        )
        self.notify_start({"host": self.location, "pid": self.pid})
        self._start_waiting()

    @default("remote_output_file")
    def _default_output(self) -> str:
        # An absolute path in the (shared) profile dir: the engine log must be findable.
        name = f"engine-{self.identifier.replace('/', '-')}-{os.getpid()}.out"
        return os.path.join(self.profile_dir, "log", name)


class RankSSHEngineSetLauncher(SSHEngineSetLauncher):
    """Engines over ssh, ``engines = {host: count}`` in host order (node order)."""

    launcher_class = RankSSHEngineLauncher
    engine_cmd = List(list(ENGINE_CMD), config=True)
    remote_python = Unicode(sys.executable, config=True, help="Python on the remote hosts")
    delay = 0.0


class RankMPIEngineSetLauncher(MPIEngineSetLauncher):
    """Engines under mpiexec; ranks come from OMPI_COMM_WORLD_* (no mpi4py needed)."""

    engine_cmd = List(list(ENGINE_CMD), config=True)

    @property
    def program(self) -> list:  # type: ignore[override]
        # ipyparallel adds --mpi, which makes every engine import mpi4py; we only need
        # the launcher's rank variables.
        return list(self.engine_cmd)

    def find_args(self) -> list:
        # Open MPI passes no environment to other hosts unless each variable is named.
        forward: list[str] = []
        for name in self.get_env():
            forward += ["-x", name]
        return (
            self.mpi_cmd
            + ["-n", str(self.n)]
            + forward
            + self.mpi_args
            + self.program
            + self.program_args
        )


class RankSlurmEngineSetLauncher(SlurmEngineSetLauncher):
    """Engines in one Slurm job: ``srun`` starts one task per rank on the job's nodes."""

    engine_cmd = List(list(ENGINE_CMD), config=True)

    default_template = Unicode(
        """#!/bin/sh
#SBATCH --export=ALL
#SBATCH --job-name=dist-notebook-{cluster_id}
#SBATCH --ntasks={n}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={tasks_per_node}
{gpu_line}
srun --kill-on-bad-exit=0 {program_and_args}
"""
    )


def remote_engines(spec: Any) -> tuple[type, dict[str, dict[str, Any]]]:
    """The engine launcher class for *spec*'s launcher, and the ipyparallel config for it.

    ``spec.launcher_config`` is merged last: any trait of the launcher (``ssh_args``,
    ``mpi_args``, ``options``, ``batch_template`` ...) can be set from there.
    """
    cls: type
    traits: dict[str, Any]
    if spec.launcher == "ssh":
        cls, traits = RankSSHEngineSetLauncher, {"engines": dict(spec.hosts)}
    elif spec.launcher == "mpi":
        hosts = ",".join(f"{h}:{n}" for h, n in spec.hosts)
        args = ["--host", hosts, "--map-by", "slot"]
        if os.geteuid() == 0:
            args.append("--allow-run-as-root")  # Open MPI refuses root without it
        cls, traits = RankMPIEngineSetLauncher, {"mpi_args": args}
    elif spec.launcher == "slurm":
        nodes = spec.nodes or 1
        gpu = f"#SBATCH --gpus-per-node={spec.gpus_per_node}" if spec.gpus_per_node else ""
        namespace = {"nodes": nodes, "tasks_per_node": spec.n // nodes, "gpu_line": gpu}
        traits = {"namespace": namespace}
        for trait, value in (
            ("queue", spec.partition),
            ("timelimit", spec.time_limit),
            ("account", spec.account),
        ):
            if value:
                traits[trait] = value
        cls = RankSlurmEngineSetLauncher
    else:
        raise ValueError(f"no remote launcher {spec.launcher!r}")
    traits.update(spec.launcher_config)
    return cls, {cls.__name__: traits}
