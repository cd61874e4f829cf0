"""One cluster's ipyparallel objects: its controller, its engine sets and its client.

``DistCluster`` owns the lifecycle (states, rank table, the process group) and asks
an ``Engines`` for everything ipyparallel does; nothing else touches ipyparallel's
``Cluster``. The launcher's own policy (which engine-set launcher, its traits, how a
scale adds and removes engines) is the spec's strategy (``cluster/engines``): an
``Engines`` is built from the spec and then holds the state itself.

    engines = Engines(cluster_id, lambda: cluster.spec, progress)
    await engines.start_controller(on_stop)
    await engines.start_engines(2, env)
    await engines.connect()
    await engines.wait_for_engines(set(), 2)
    ...
    await engines.stop_all()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipyparallel as ipp
import psutil
from traitlets.config import Config

from .. import envvars, privates
from . import reap
from .errors import ClusterError
from .launchers import OurControllerLauncher, PrivateCluster, controller_args, engine_args
from .profiles import own_profile_dir

if TYPE_CHECKING:
    from .spec import ClusterSpec

log = logging.getLogger("dist_notebook")

# Seconds without a new engine in a start's wait before a fresh client looks again.
RESYNC_S = 5.0


class Engines:
    """The controller, every engine set started (the first, then replacements and a
    scale's additions, in start order) and the client of one cluster."""

    def __init__(
        self, cluster_id: str, spec: Callable[[], ClusterSpec], progress: Callable[[str], None]
    ) -> None:
        self.cluster_id = cluster_id
        self._spec = spec  # the cluster's spec as it is now (a scale changes it)
        self.progress = progress
        self.client: ipp.Client | None = None
        self._ipp: ipp.Cluster | None = None
        self._sets: list[str] = []
        self._last: str | None = None  # the engine set started last

    # --- what it is ------------------------------------------------------------
    @property
    def started(self) -> bool:
        """The controller was started (this life of the cluster or an earlier one)."""
        return self._ipp is not None

    @property
    def profile_dir(self) -> str:
        return self._ipp.profile_dir if self._ipp else ""

    @property
    def ipp_cluster_id(self) -> str:
        """ipyparallel's id of the cluster ("" before the start): its files are named so."""
        return self._ipp.cluster_id if self._ipp else ""

    @property
    def client_file(self) -> str:
        """The client's connection file of the started controller ("" before)."""
        if self._ipp is None or self._ipp.controller is None:
            return ""
        return str(self._ipp.controller.connection_files["client"])

    @property
    def controller_pid(self) -> int | None:
        """The controller process's pid (None before its start or after its stop)."""
        controller = self._ipp.controller if self._ipp else None
        process = getattr(controller, "process", None)
        return process.pid if process is not None else None

    def launcher_config(self, name: str) -> Config:
        """The configuration section of launcher class *name* (what a restart uses)."""
        assert self._ipp is not None
        return self._ipp.config[name]  # type: ignore[no-any-return]

    def engine_sets(self) -> list[tuple[str, Any]]:
        """(id, ipyparallel engine set) of the engine sets started and still known."""
        if self._ipp is None:
            return []
        sets = self._ipp.engines
        return [(set_id, sets[set_id]) for set_id in self._sets if set_id in sets]

    def launched_engine_sets(self) -> set[str]:
        """Ids of every engine set ipyparallel was asked to start, one whose start
        failed included."""
        return set(self._ipp.engines) if self._ipp is not None else set()

    def require_client(self) -> ipp.Client:
        if self.client is None:
            raise ClusterError("no cluster is running: run %dist_cluster start")
        return self.client

    # --- start -----------------------------------------------------------------
    async def start_controller(self, on_stop: Callable[[dict[str, Any]], None]) -> None:
        spec = self._spec()
        launcher, config = spec.engines.engine_launcher(spec)
        self._ipp = PrivateCluster(
            config=Config(config),
            n=spec.n,
            controller_ip=spec.ip,
            controller_launcher_class=OurControllerLauncher,
            engine_launcher_class=launcher,
            controller_args=controller_args(spec),
            log_level=logging.ERROR,
            profile_dir=own_profile_dir(self.cluster_id),
        )
        self.progress(f"starting controller on {spec.ip}")
        await self._ipp.start_controller()
        self._ipp.controller.on_stop(on_stop)

    async def connect(self) -> ipp.Client:
        assert self._ipp is not None
        self.client = await self._ipp.connect_client()
        return self.client

    async def start_engines(
        self, count: int, env: dict[str, str], *, traits: dict[str, Any] | None = None
    ) -> str:
        """Start one engine set of *count* engines with *env*; its id.

        With *traits* of its launcher (a scale's engine set, ``scale_starts``) the set is
        one beside others: its id is chosen before it starts and given to its engines,
        so each can tell which set it came from (``rankenv.origin``)."""
        assert self._ipp is not None
        extra: dict[str, Any] = {}
        if traits is not None:
            set_id = privates.new_engine_set_id(self._ipp)
            env = {**env, envvars.ENGINE_SET: set_id}
            extra = {**traits, "engine_set_id": set_id}
        # (ipp.Cluster has no engine_args trait: it must go to the engine launcher.)
        self._last = await self._ipp.start_engines(
            count, environment=env, engine_args=engine_args(self._spec()), **extra
        )
        self._sets.append(self._last)
        self.owner_only_files()
        return self._last

    async def stop_engine_sets(self, set_ids: list[str] | None = None) -> None:
        """Stop these engine sets (every one by default) together (each stop waits for
        its launcher: an mpiexec's exit, a Slurm job's cancel) and forget them."""
        assert self._ipp is not None
        if set_ids is None:
            await self._ipp.stop_engines()
            self._sets.clear()
            return
        await asyncio.gather(*(self._ipp.stop_engines(s) for s in set_ids))
        for set_id in set_ids:
            self._sets.remove(set_id)

    async def drop_engine_set(self, set_id: str) -> None:
        """Stop an engine set that failed to start, and forget it either way (a
        launcher whose host cannot be reached cannot be stopped; nothing runs there)."""
        assert self._ipp is not None
        try:
            await self._ipp.stop_engines(set_id)
        except Exception as e:  # the host is unreachable: its engine never started
            log.info("engine set %s that failed: %s", set_id, e)
        self._ipp.engines.pop(set_id, None)
        if set_id in self._sets:
            self._sets.remove(set_id)

    def configure_engine_launcher(self) -> None:
        """The engine launcher's configuration follows the spec as it is now (after a
        scale): a later ``restart`` starts the cluster so, in one engine set."""
        assert self._ipp is not None
        spec = self._spec()
        _, config = spec.engines.engine_launcher(spec)
        for name, traits in config.items():
            section = self._ipp.config[name]
            if not isinstance(section, Config):
                section = self._ipp.config[name] = Config()
            section.update(traits)

    def owner_only_files(self) -> None:
        """ipyparallel creates the logs with the default umask (world-readable); they
        hold the ranks' output, which may hold the user's data: owner only."""
        assert self._ipp is not None
        for path in reap.cluster_files(self._ipp.profile_dir, self._ipp.cluster_id):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(path, 0o600)

    async def wait_for_engines(self, old: set[int], count: int) -> None:
        """Until *count* engines beyond *old* registered (the spec's start timeout)."""
        assert self.client is not None
        timeout = self._spec().start_timeout
        deadline = time.monotonic() + timeout
        seen = -1
        moved = time.monotonic()
        while True:
            new = [i for i in self.client.ids if i not in old]
            if len(new) != seen:
                seen, moved = len(new), time.monotonic()
                self.progress(f"engines registered: {seen}/{count}")
            if seen >= count:
                return
            if time.monotonic() - moved > RESYNC_S:
                await self._resync_client(old)
                moved = time.monotonic()
            self._check_engines_alive()
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"only {seen} of {count} engines registered within {timeout:.0f} s; "
                    f"see the engine logs in {self.profile_dir}/log"
                )
            await asyncio.sleep(0.05)

    async def _resync_client(self, old: set[int]) -> None:
        """A client learns of engines from the controller's notifications, and of those
        registered before it connected from its connection's reply; one that registers
        in between (its notification sent before the client's subscription took) is
        never seen: a start on a loaded machine waited out its timeout with 15 of 16.
        A fresh client's reply lists every engine: it takes over when it sees more."""
        assert self._ipp is not None and self.client is not None
        fresh = await self._ipp.connect_client()
        if len(set(fresh.ids) - old) > len(set(self.client.ids) - old):
            log.info("cluster %s: a fresh client sees engines %s", self.cluster_id, fresh.ids)
            stale, self.client = self.client, fresh
            stale.close()
        else:
            fresh.close()

    def _check_engines_alive(self) -> None:
        """Fail fast, with the engine's own output, when an engine exits while starting."""
        assert self._ipp is not None
        engine_set = self._ipp.engines.get(self._last or "")
        exited = (getattr(engine_set, "stop_data", None) or {}).get("engines", {})
        for identifier, data in exited.items():
            output = getattr(engine_set, "outputs", {}).get(identifier) or ""
            tail = "\n".join(output.splitlines()[-20:]) or "(no output)"
            raise ClusterError(
                f"engine {identifier} exited while starting ({data.get('exit_code')}):\n{tail}"
            )

    async def end_processes(self, pids: list[int]) -> None:
        """Kill the process trees of *pids* (engines to replace) and wait until their
        launchers recorded the exits, so those are buried, not taken for new deaths."""
        tree = reap.process_tree(pids)
        for proc in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        await asyncio.get_running_loop().run_in_executor(None, reap.reap, tree, 2.0)
        await self.exits_recorded({p.pid for p in tree}, 5.0)

    async def exits_recorded(self, pids: set[int], timeout: float) -> None:
        """Wait until the launchers have recorded the exit of *pids* (their wait thread
        polls), so those records are buried with the rest, not taken for new deaths."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            recorded = set()
            for _, engine_set in self.engine_sets():
                exits = getattr(engine_set, "stop_data", {}).get("engines", {})
                recorded |= {data.get("pid") for data in exits.values()}
            if pids <= recorded:
                return
            await asyncio.sleep(0.05)

    # --- what runs here ----------------------------------------------------------
    def local_pids(self) -> list[int]:
        """Pids of the processes this kernel started: the controller and, where the
        ranks run on this machine, the engines."""
        if self._ipp is None:
            return []
        pids = [pid] if (pid := self.controller_pid) is not None else []
        if self._spec().engines.on_this_machine:
            for engine_set in self._ipp.engines.values():
                for launcher in getattr(engine_set, "launchers", {}).values():
                    if getattr(launcher, "process", None) is not None:
                        pids.append(launcher.process.pid)
        return pids

    # --- stop ------------------------------------------------------------------
    async def stop_all(self) -> None:
        """The client closed, every engine and the controller stopped, their whole
        process tree reaped and their files removed; the profile folder too."""
        if self.client is not None:
            self.client.close()
            self.client = None
        if self._ipp is None:
            return
        # The whole tree, taken now: the controller's schedulers and the engines'
        # nannies are not ipyparallel's to stop, and outlive a controller that died.
        tree = reap.process_tree(self.local_pids())
        # Engines first, the controller last: until it stops, a kernel killed in the
        # middle of a slow stop (Jupyter's shutdown waits 5 s) still has the
        # controller's own clean-up (boot/controller.py) remove the files.
        try:
            # ipyparallel stops engines one after the other, waiting for each to exit
            # (~3 s each with torch loaded); signalled together they exit in parallel.
            await self._ipp.signal_engines(signal.SIGTERM)
            await self._ipp.stop_engines()
        except Exception as e:  # a process already gone is fine; say anything else
            log.warning("stopping the engines: %s", e)
        controller = reap.process_tree(self.local_pids())  # what is left: the controller
        engines = [p for p in tree if p.pid not in {c.pid for c in controller}]
        reap.reap(engines)
        files = reap.cluster_files(self._ipp.profile_dir, self._ipp.cluster_id)
        reap.remove_files(files)
        try:
            await self._ipp.stop_cluster()
        except Exception as e:  # a process already gone is fine; say anything else
            log.warning("stopping the ipyparallel cluster: %s", e)
        # In this loop's thread: at interpreter exit no executor takes new work.
        left = reap.reap(tree)
        if left:
            log.warning("processes of cluster %s could not be ended: %s", self.cluster_id, left)
        reap.remove_files(reap.cluster_files(self._ipp.profile_dir, self._ipp.cluster_id))
        if self._ipp.profile_dir == own_profile_dir(self.cluster_id):
            shutil.rmtree(self._ipp.profile_dir, ignore_errors=True)
