"""ipyparallel launchers that start our entry points and give each engine its rank.

The local launcher is ipyparallel's, with three changes: the command is our boot module
(rank environment, parent watch, early torch import, then ipyparallel's engine), each
engine's environment carries its rank, so the rank is known before torch is imported,
and engines are forked from the kernel's fork server when it runs (``forkserver``).
MPI, SSH and Slurm engines use ipyparallel's launchers with our command (see
``remote_launchers`` for how a ClusterSpec becomes their configuration); each engine
learns its place on its host from the launcher, and the kernel numbers the ranks
across hosts (``cluster.placement``).
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import psutil
from ipyparallel import Cluster
from ipyparallel.cluster.launcher import (
    LocalControllerLauncher,
    LocalEngineLauncher,
    LocalEngineSetLauncher,
    MPIEngineSetLauncher,
    SlurmEngineSetLauncher,
    SSHEngineLauncher,
    SSHEngineSetLauncher,
    sshx,
)
from traitlets import Bool, Dict, Integer, List, Unicode, default

from .. import envvars, privates
from ..engine.parent import ENV_VAR as PARENT_ENV
from . import forkserver

if TYPE_CHECKING:
    from .spec import ClusterSpec

ENGINE_CMD = [sys.executable, "-m", "dist_notebook.boot.engine"]
CONTROLLER_CMD = [sys.executable, "-m", "dist_notebook.boot.controller"]
SSH_CONFIG_ENV = envvars.SSH_CONFIG


class RankEngineLauncher(LocalEngineLauncher):
    """One local engine whose environment names its rank.

    Engine ``i`` of a set gets rank ``DIST_NOTEBOOK_RANK_OFFSET + i`` (the offset lets a
    single replacement engine take the rank of the one it replaces). The engine is
    forked from the kernel's fork server (``cluster.forkserver``) when one runs, with
    torch and ipyparallel already imported; otherwise it is spawned as ipyparallel does.
    """

    engine_cmd = List(list(ENGINE_CMD), config=True)
    _server: Any = None

    def get_env(self) -> dict:
        env = super().get_env()
        rank = int(self.identifier) + int(env.get(envvars.RANK_OFFSET, "0"))
        env[envvars.RANK] = str(rank)
        env[envvars.LOCAL_RANK] = str(rank)
        return env

    def start(self) -> None:
        server = forkserver.current()
        args = list(self.args)
        if server is None or args[: len(ENGINE_CMD)] != ENGINE_CMD or self.state != "before":
            return super().start()
        env = dict(os.environ)
        env.update(self.get_env())
        # The engine's parent is the fork server, which lives as long as the kernel.
        env[PARENT_ENV] = str(server.pid)
        try:
            pid = server.spawn(args[len(ENGINE_CMD) :], env, self.work_dir, self.output_file)
        except forkserver.ForkServerError as e:
            self.log.warning("%s; starting engine %s as a new process", e, self.identifier)
            return super().start()
        self._server = server
        self.pid = pid
        self.process = psutil.Process(pid)
        self.notify_start(pid)
        privates.start_waiting(self)

    def _wait(self) -> None:
        if self._server is None:
            return super()._wait()  # type: ignore[no-any-return]
        # The fork server is the engine's parent: it reports the exit code at once.
        stop_waiting = privates.stop_waiting_event(self)
        code = self._server.wait_exit(self.pid, stop_waiting)
        while code is None and not stop_waiting.is_set() and self.state == "running":
            # The server is gone (its engines follow it within a parent-watch period).
            try:
                self.process.wait(timeout=1.0)
                break
            except psutil.TimeoutExpired:
                continue
        stop_data = {"exit_code": code, "pid": self.pid, "identifier": self.identifier}
        self.loop.add_callback(lambda: self.notify_stop(stop_data))


class RankEngineSetLauncher(LocalEngineSetLauncher):
    """A set of local engines started at once (no delay: ranks come from the env).

    When the kernel's fork server is still importing, the set waits for it (off the
    event loop): a forked engine is ready sooner than one spawned now would be.
    """

    launcher_class = RankEngineLauncher
    engine_cmd = List(list(ENGINE_CMD), config=True)
    delay = 0.0

    def start(self, n: int) -> Any:
        server = forkserver.current()
        if server is None:
            return super().start(n)
        start = super().start

        async def when_ready() -> Any:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, server.wait_ready)
            return start(n)

        return when_ready()


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
        return privates.ssh_files_to_send(self)

    def get_env(self) -> dict:
        env = super().get_env()
        host, _, local = self.identifier.rpartition("/")
        parent = self.parent
        engines = dict(getattr(parent, "engines", {}) or {})
        # A set started by scale names every host of the cluster (node order) and where
        # its engines' local ranks start on each host; the first set is all of them.
        order = list(getattr(parent, "hosts", None) or engines)
        if host in order:
            env[envvars.NODE] = str(order.index(host))
        sizes = dict(getattr(parent, "local_sizes", None) or {})
        if host in sizes or host in engines:
            count = sizes.get(host, engines.get(host))
            env[envvars.LOCAL_SIZE] = str(count if isinstance(count, int) else 1)
        first = dict(getattr(parent, "first_local", None) or {}).get(host, 0)
        env[envvars.LOCAL_RANK] = str(int(local) + int(first))
        env[envvars.HOST_NAME] = host
        return env

    def start(self, hostname=None, user=None, port=None):  # type: ignore[no-untyped-def]
        deferred = getattr(self.parent, "deferred", None)
        if deferred is not None:  # the set starts its engines together (start_together)
            # Bound on this thread, as a start here would: the exit-waiting thread calls
            # back through it.
            self.loop  # noqa: B018
            deferred.append((self, {"hostname": hostname, "user": user, "port": port}))
            return None
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
        # One ssh round trip with a plain shell (ipyparallel's own sshx): no remote
        # Python start-up, which costs seconds on a busy host.
        self.pid = sshx(
            self._ssh(),
            self.program + self.program_args,
            self.get_env(),
            self.remote_output_file,
        )
        self.notify_start({"host": self.location, "pid": self.pid})
        privates.start_waiting(self)

    def get_output(self, remove: bool = False) -> str:
        if not self.shared_filesystem:
            return super().get_output(remove=remove)
        # The log is on the shared filesystem: read it here (ipyparallel would copy it
        # back with three ssh round trips per engine).
        output: str | None = getattr(self, "_output", None)
        if output is None:
            try:
                with open(self.remote_output_file, errors="replace") as f:
                    output = f.read()
                if remove:
                    os.remove(self.remote_output_file)
            except FileNotFoundError:
                output = ""
            self._output = output
        return output

    def _ssh(self) -> list[str]:
        return [*self.ssh_cmd, *self.ssh_args, self.location]

    def signal(self, sig: int) -> None:
        if self.state == "running":
            # A plain `kill`: one ssh round trip, no remote Python.
            subprocess.run(
                [*self._ssh(), "--", f"kill -{int(sig)} {self.pid}"],
                capture_output=True,
                timeout=30,
                check=False,
            )

    def wait_one(self, timeout: float | None) -> int:
        """Wait (on the host, in its shell) for the engine to exit: -1, or TimeoutError."""
        rounds = "" if timeout is None else f"[ $i -ge {max(1, int(timeout * 5))} ] && exit 3; "
        script = (
            f"i=0; while kill -0 {self.pid} 2>/dev/null; do {rounds}i=$((i+1)); sleep 0.2; done"
        )
        done = subprocess.run(
            [*self._ssh(), "--", script], capture_output=True, text=True, check=False
        )
        if done.returncode == 3:
            raise TimeoutError("still running")
        if done.returncode != 0:
            # The host is unreachable (ssh's 255): its state is unknown, not ended. The
            # controller's heartbeat decides whether its engines are gone.
            time.sleep(1)
            raise TimeoutError(f"ssh {self.location}: {done.stderr.strip() or 'failed'}")
        return -1

    @default("remote_output_file")
    def _default_output(self) -> str:
        # An absolute path in the (shared) profile dir: the engine log must be findable.
        name = f"engine-{self.identifier.replace('/', '-')}-{os.getpid()}.out"
        return os.path.join(self.profile_dir, "log", name)


def ssh_config_args() -> list[str]:
    # An ssh client config for the engines' ssh and scp (default: ~/.ssh/config).
    path = os.environ.get(SSH_CONFIG_ENV)
    return ["-F", path] if path else []


def start_together(starts: list[tuple[Any, dict[str, Any]]], per_host: int) -> None:
    """Start ssh engine launchers (each with its ``start`` arguments) all hosts at once,
    at most *per_host* of a host at a time; a host's first one alone first when it copies
    the connection files the others then read. Raises the first start's error, once every
    start has ended (those that started are the set's to stop, as after a sequential
    start that failed)."""
    from concurrent.futures import ThreadPoolExecutor

    by_host: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    for launcher, kwargs in starts:
        by_host.setdefault(launcher.identifier.rpartition("/")[0], []).append((launcher, kwargs))
    errors: list[BaseException] = []

    def one(item: tuple[Any, dict[str, Any]]) -> None:
        launcher, kwargs = item
        try:
            launcher.start(**kwargs)
        except Exception as e:  # kept, raised once all the others have ended
            errors.append(e)

    def host(items: list[tuple[Any, dict[str, Any]]]) -> None:
        if not items[0][0].shared_filesystem:
            one(items[0])
            items = items[1:]
        with ThreadPoolExecutor(max(1, min(per_host, len(items)))) as pool:
            list(pool.map(one, items))

    if by_host:
        with ThreadPoolExecutor(len(by_host)) as pool:
            list(pool.map(host, by_host.values()))
    if errors:
        raise errors[0]


class RankSSHEngineSetLauncher(SSHEngineSetLauncher):
    """Engines over ssh, ``engines = {host: count}`` in host order (node order)."""

    parallel_per_host = Integer(
        8,
        config=True,
        help="""Engines of one host whose ssh connections start at once.

        sshd's MaxStartups (10 by default) begins refusing connections beyond 10 that are
        not yet authenticated; raise it with the host's MaxStartups.""",
    )
    # While start() runs: the engines' launchers, built by ipyparallel's loop, not yet
    # started (RankSSHEngineLauncher.start puts itself here).
    deferred: list[tuple[Any, dict[str, Any]]] | None = None

    def start(self, n):  # type: ignore[no-untyped-def]
        # ipyparallel's start builds and starts each engine one ssh round trip after
        # another (1-5 s each on a busy host: the last of 32 engines on 4 hosts came
        # 140 s after the first). Its loop builds them; they start together after it.
        self.deferred = []
        try:
            keys = super().start(n)
        finally:
            starts, self.deferred = self.deferred, None
        start_together(starts, self.parallel_per_host)
        return keys

    @default("ssh_args")
    def _ssh_args(self) -> list[str]:
        return ssh_config_args()

    @default("scp_args")
    def _scp_args(self) -> list[str]:
        return ssh_config_args()

    def signal(self, sig: int) -> None:
        # Every engine at once: one ssh round trip each, in parallel, not one by one.
        from concurrent.futures import ThreadPoolExecutor

        launchers = list(self.launchers.values())
        if launchers:
            with ThreadPoolExecutor(len(launchers)) as pool:
                list(pool.map(lambda el: el.signal(sig), launchers))

    launcher_class = RankSSHEngineLauncher
    engine_cmd = List(list(ENGINE_CMD), config=True)
    remote_python = Unicode(sys.executable, config=True, help="Python on the remote hosts")
    delay = 0.0
    # Set by scale for the engines it adds (see cluster/scale.py): every host of the
    # cluster in node order, each host's first new local rank and its new rank count.
    hosts: Any = List(help="all hosts of the cluster, in node order (default: engines' hosts)")
    first_local: Any = Dict(help="host -> local rank of this set's first engine there")
    local_sizes: Any = Dict(help="host -> ranks on that host once this set runs")


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
{tasks_line}
{gpu_line}
srun --kill-on-bad-exit=0 {program_and_args}
"""
    )

    def __init__(self, work_dir: str = ".", config: Any = None, **kwargs: Any) -> None:
        super().__init__(work_dir=work_dir, config=config, **kwargs)
        # ipyparallel writes the job script into the working directory (the user's
        # notebook folder); keep it with the cluster's other files, removed at stop.
        if self.profile_dir:
            self.batch_file = os.path.join(
                self.profile_dir, f"{self.batch_file_name}-{self.cluster_id or 'engines'}"
            )


def remote_engines(spec: ClusterSpec) -> tuple[type, dict[str, dict[str, Any]]]:
    """The engine launcher class for *spec*'s launcher, and the ipyparallel config for it.

    ``spec.launcher_config`` is merged last: any trait of the launcher (``ssh_args``,
    ``mpi_args``, ``options``, ``batch_template`` ...) can be set from there.
    """
    if spec.engines.on_this_machine:
        raise ValueError(f"no remote launcher {spec.launcher!r}")
    return spec.engines.engine_launcher(spec)  # type: ignore[no-any-return]


def slurm_namespace(n: int, nodes: int, gpus_per_node: int = 0) -> dict[str, Any]:
    """The job script's fields for *n* tasks on at most *nodes* nodes.

    An even split asks for the same number of tasks on each node; any other (a job that
    scale submits for a few more ranks) lets Slurm spread the tasks over the nodes.
    """
    nodes = max(1, min(nodes, n))
    even = n % nodes == 0
    return {
        "nodes": nodes,
        "tasks_per_node": n // nodes,
        "tasks_line": f"#SBATCH --ntasks-per-node={n // nodes}" if even else "",
        "gpu_line": f"#SBATCH --gpus-per-node={gpus_per_node}" if gpus_per_node else "",
    }


def engine_args(spec: ClusterSpec) -> list[str]:
    """The options of every engine of *spec*'s cluster (at start and when it grows).

    Engines leave by themselves ~10 heartbeats after the controller is gone. An engine
    waits for the controller's reply to its registration as long as the start does
    (ipyparallel gives up after 5 s, too soon on a loaded machine registering 64)."""
    wait = max(5.0, min(60.0, float(spec.start_timeout)))
    args = ["--IPEngine.max_heartbeat_misses=10", f"--IPEngine.timeout={wait:g}"]
    return args + spec.engines.engine_args(spec)


def controller_args(spec: ClusterSpec) -> list[str]:
    """The controller's options. Between its reply to an engine's registration and that
    engine's first heartbeat the controller waits 30 s by default, then forgets the
    engine while the engine goes on living: on a loaded machine starting 64 engines one
    stayed unregistered until the start timed out. It waits as long as the start."""
    return [
        f"--HeartMonitor.period={spec.heartbeat_ms}",
        f"--IPController.registration_timeout={max(30, math.ceil(spec.start_timeout))}",
    ]


def mpi_args(spec: ClusterSpec, hosts_counts: Any = None) -> list[str]:
    """mpiexec's options: the hosts, and what keeps one rank's death from ending the rest.

    *hosts_counts* (``((host, n), ...)``, default ``spec.hosts``) places the engines of
    one mpiexec; hosts with no rank (emptied by scale) are left out."""
    from .hosts import network_of

    given = spec.hosts if hosts_counts is None else hosts_counts
    hosts = ",".join(f"{h}:{n}" for h, n in given if n > 0)
    args = ["--host", hosts, "--map-by", "slot"]
    # A killed engine must not take every other rank down with it: the cluster reports
    # the loss and `restart` brings the ranks back.
    args += ["--enable-recovery", "--mca", "orte_abort_on_non_zero_status", "0"]
    network = network_of(spec.ip)
    if network:
        # mpiexec and its daemons talk over the cluster's network only.
        args += ["--mca", "oob_tcp_if_include", network]
    ssh = ssh_config_args()
    if ssh:
        args += ["--mca", "plm_rsh_agent", " ".join(["ssh", *ssh])]
    if os.geteuid() == 0:
        args.append("--allow-run-as-root")  # Open MPI refuses root without it
    return args
