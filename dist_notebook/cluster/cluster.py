"""A cluster of engines with torch.distributed wired: the kernel-side lifecycle.

    cluster = DistCluster(ClusterSpec(n=2))      # CPU ranks with gloo
    cluster.start_sync()                         # or: await cluster.start()
    for out in run_on_ranks(cluster, "print(rank, world_size)"):  # onranks.execute
        print(out.rank, out.stdout)
    cluster.stop_sync()                          # idempotent; also runs at exit

States (``ClusterState``): new -> starting -> ready; ready -> restarting -> ready;
starting/restarting -> failed; any -> stopping -> stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import ipyparallel as ipp
import psutil
from traitlets.config import Config

from .. import envvars, privates
from ..engine import group, shm
from ..privatedir import UnsafeDirectoryError, private_dir
from ..protocol import ClusterState, EngineState
from ..store import StoreError, StoreWriter, store_path
from ..store.recorder import record
from ..store.schema import full_disk_message
from . import limits, reap, registry
from . import scale as scaling
from .errors import ClusterError
from .facts import KEEP, ClusterFacts, Keep, RankInfo
from .health import Health
from .launchers import (
    OurControllerLauncher,
    PrivateCluster,
    controller_args,
    engine_args,
)
from .loop import sync_twin
from .owner import ClusterOwner
from .placement import PlacementError, local_ranks, ranks_across_hosts
from .spec import ClusterConfigError, ClusterSpec

log = logging.getLogger("dist_notebook")
Progress = Callable[[str], None]


# Seconds without a new engine in a start's wait before a fresh client looks again.
RESYNC_S = 5.0


def _quiet(_: str) -> None:
    """The default progress sink: say nothing."""


class DistCluster:
    """ipyparallel controller + one engine per rank + the default process group."""

    def __init__(
        self,
        spec: ClusterSpec | None = None,
        *,
        progress: Progress | None = None,
        store: StoreWriter | None = None,
    ) -> None:
        spec = spec or ClusterSpec()
        self.id = uuid.uuid4().hex[:8]
        self.backend = spec.resolved_backend
        # State, spec, rank table and failure: changed only through move() (facts.py).
        self.facts = ClusterFacts(self.id, spec, self.writer, self.backend)
        self.client: ipp.Client | None = None
        self.progress: Progress = progress or _quiet
        self.start_seconds: float | None = None
        self.ready_since: float | None = None  # time.time() of this life's ready
        self._ipp: ipp.Cluster | None = None
        self._generation = 0
        self._store = store
        self._store_error: str | None = None
        self._engine_set: str | None = None
        # Every engine set started (the first, then replacements of dead ranks), and the
        # exit records of engines already replaced.
        self._engine_sets: list[str] = []
        self.pair_ports: list[int] = []
        self.master_addr: str | None = None
        self._tearing_down = False
        # Where ranks dump their stacks on SIGUSR1 (owner-only; see cluster/onranks/stacks.py).
        # Made by start() and removed by stop() or a failed start, so a cluster that is
        # refused or never started leaves no folder behind.
        self.stack_dir = ""
        # Stops and interrupts it for every entry point, the panel's requests included.
        self.owner = ClusterOwner(self)
        # Dead and unresponsive ranks, the watch that notices them, a controller's death.
        self.health = Health(self)

    # --- properties ------------------------------------------------------------
    @property
    def state(self) -> ClusterState:
        return self.facts.state

    @property
    def spec(self) -> ClusterSpec:
        return self.facts.spec

    @property
    def ranks(self) -> list[RankInfo]:
        """The rank table, in rank order (a copy: it changes only through move())."""
        return self.facts.ranks

    @property
    def failure(self) -> str | None:
        """Why the cluster cannot work until restarted (the controller died), or None."""
        return self.facts.failure

    @property
    def n(self) -> int:
        return self.spec.n

    @property
    def profile_dir(self) -> str:
        return self._ipp.profile_dir if self._ipp else ""

    @property
    def client_file(self) -> str:
        """The ipyparallel client's connection file of the started cluster ("" before the
        start): another process opens it (``ipyparallel.Client(path)``) to run cells on
        these engines, as a kernel attached to a detached cluster does. It holds the
        cluster's key; it lives in the cluster's own profile folder (owner-only)."""
        if self._ipp is None or self._ipp.controller is None:
            return ""
        return str(self._ipp.controller.connection_files["client"])

    @property
    def started(self) -> bool:
        """The controller was started (this life or an earlier one)."""
        return self._ipp is not None

    @property
    def tearing_down(self) -> bool:
        """Engines and controller are being stopped by the cluster itself."""
        return self._tearing_down

    def engine_sets(self) -> list[tuple[str, Any]]:
        """(id, ipyparallel engine set) of the engine sets started (the first, then
        replacements and scale's additions) and still known, in start order."""
        if self._ipp is None:
            return []
        sets = self._ipp.engines
        return [(set_id, sets[set_id]) for set_id in self._engine_sets if set_id in sets]

    def launched_engine_sets(self) -> set[str]:
        """Ids of every engine set ipyparallel was asked to start, one whose start
        failed included."""
        return set(self._ipp.engines) if self._ipp is not None else set()

    def engine_ids(self, ranks: list[int] | None = None) -> list[int]:
        """ipyparallel engine ids for *ranks* (all ranks by default), in rank order."""
        by_rank = {r.rank: r.engine_id for r in self.ranks}
        wanted = sorted(by_rank) if ranks is None else ranks
        missing = [r for r in wanted if r not in by_rank]
        if missing:
            raise ClusterError(f"unknown rank {missing[0]}: this cluster has ranks 0..{self.n - 1}")
        return [by_rank[r] for r in wanted]

    def rank_of(self, engine_id: int) -> int:
        for r in self.ranks:
            if r.engine_id == engine_id:
                return r.rank
        return -1

    def require_client(self) -> ipp.Client:
        if self.client is None:
            raise ClusterError("no cluster is running: run %dist_cluster start")
        return self.client

    def require_ready(self) -> ipp.Client:
        if self.failure is not None:
            raise ClusterError(self.failure)
        if self.state != ClusterState.READY or self.client is None:
            raise ClusterError(
                f"the cluster is {self.state.value}, not ready: run %dist_cluster start "
                "(or %dist_cluster restart)"
            )
        return self.client

    # --- lifecycle -------------------------------------------------------------
    async def start(self) -> DistCluster:
        if self.state not in (ClusterState.NEW, ClusterState.STOPPED, ClusterState.FAILED):
            raise ClusterError(f"the cluster is already {self.state.value}: stop it first")
        try:
            limits.check_address(self.spec.ip)
            limits.check_capacity(self.spec)
            # Files in /dev/shm of this user's processes that ended without removing
            # them (a kernel killed in a push): they hold memory until reboot otherwise.
            shm.sweep_orphans()
        except ClusterConfigError:
            if self.state == ClusterState.NEW:
                self.move(ClusterState.FAILED)  # refused: a new start may follow at once
            raise
        t0 = time.perf_counter()
        self.move(ClusterState.STARTING)
        registry.add(self)
        try:
            self._make_stack_dir()
            self._ipp = self._make_ipp_cluster()
            self.progress(f"starting controller on {self.spec.ip}")
            await self._ipp.start_controller()
            self._ipp.controller.on_stop(self.health.controller_stopped)
            self._record_cluster()
            await self._start_engines()
            self.client = await self._ipp.connect_client()
            await self.wait_for_engines(set(), self.n)
            await self._setup_ranks(sorted(self.client.ids))
        except BaseException as e:
            self.move(ClusterState.FAILED)
            await self._teardown()
            self._remove_stack_dir()
            if isinstance(e, OSError) and e.errno == errno.ENOSPC:
                # ipyparallel writes its profile files beside the run store.
                raise ClusterError(full_disk_message(store_path(), e)) from None
            raise
        return self.ready_after(t0)

    def _make_stack_dir(self) -> None:
        if not self.spec.engines.on_this_machine:
            # Only local ranks are asked for their stacks (a signal to their pids). A
            # folder here would be one that other hosts lack, and that nobody removes
            # when the kernel is killed: remote engines do not watch the kernel.
            self.stack_dir = ""
            return
        if not self.stack_dir or not os.path.isdir(self.stack_dir):
            # In the cluster's own (owner-only) profile folder: whoever removes that
            # folder (a stop, or the controller when the kernel died) removes this too.
            stacks = Path(own_profile_dir(self.id)) / "stacks"
            stacks.mkdir(exist_ok=True, mode=0o700)
            self.stack_dir = str(stacks)

    def _remove_stack_dir(self) -> None:
        if self.stack_dir:
            shutil.rmtree(self.stack_dir, ignore_errors=True)

    def ready_after(self, t0: float) -> DistCluster:
        """Ready (again) after a start, restart or scale that began at *t0*."""
        self.start_seconds = time.perf_counter() - t0
        self.ready_since = time.time()
        self.move(ClusterState.READY)
        self.owner.watch()  # the panel's Stop and Interrupt reach this life of it
        self._owner_only_files()  # the engine-set file is written once engines run
        self.health.watch()
        return self

    start_sync = sync_twin(start)

    def record_in_store(self) -> None:
        """Write the cluster, its ranks and its state to the run store, as its start
        did: for a cluster started unrecorded (a warm spare taken, cluster/pool.py)."""
        self._record_cluster()
        self.facts.record_all()

    async def restart(self, everything: bool = False) -> DistCluster:
        """Replace dead ranks' engines (or, with none dead or *everything*, every engine)
        and re-create the group. Survivors of a partial restart keep their state."""
        if self.failure is not None:
            # Engines cannot move to a new controller: start everything afresh.
            self.progress(f"{self.failure.split(':')[0]}; starting a new cluster")
            await self._teardown()
            self.move(ClusterState.FAILED, failure=None)  # failed since the controller died
            return await self.start()
        if self._ipp is None or self.client is None:
            raise ClusterError("no cluster to restart: run %dist_cluster start")
        if self.state == ClusterState.RESTARTING:  # the health watch replaces a rank
            raise ClusterError(
                "the cluster is already restarting (a rank is being replaced): see "
                "%dist_cluster status in a few seconds"
            )
        t0 = time.perf_counter()
        # Remote engines are started per host by their launcher: restart them all.
        dead = {} if everything or not self.spec.engines.on_this_machine else self.dead_ranks()
        self.move(ClusterState.RESTARTING)
        old = set(self.client.ids)
        try:
            if dead:
                await self._replace(dead, old)
            else:
                self.progress("stopping engines")
                await self._ipp.stop_engines()
                self._engine_sets.clear()
                await self._start_engines()
                await self.wait_for_engines(old, self.n)
                await self._setup_ranks(sorted(set(self.client.ids) - old))
        except BaseException:
            self.move(ClusterState.FAILED)
            raise
        return self.ready_after(t0)

    restart_sync = sync_twin(restart)

    async def scale(self, n: int, hosts: str | None = None) -> float:
        """Make the cluster have *n* ranks between cells (ssh, mpi: laid out as *hosts*
        says, if given); the seconds it took (cluster/scale.py)."""
        return await scaling.scale(self, n, hosts)

    scale_sync = sync_twin(scale)

    async def stop(self) -> None:
        """Stop engines and controller; calling it again does nothing."""
        if self.state in (ClusterState.NEW, ClusterState.STOPPED):
            return
        self.move(ClusterState.STOPPING)
        await self._teardown()
        self.move(ClusterState.STOPPED)
        self._remove_stack_dir()
        registry.discard(self)

    stop_sync = sync_twin(stop)

    def interrupt(self, ranks: list[int] | None = None) -> None:
        """Send SIGINT to the ranks' engines (through ipyparallel's control channel)."""
        if self.client is None:
            return
        targets = self.engine_ids(ranks)
        self.client.send_signal(signal.SIGINT, targets=targets, block=False)

    async def __aenter__(self) -> DistCluster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __enter__(self) -> DistCluster:
        return self.start_sync()

    def __exit__(self, *exc: object) -> None:
        self.stop_sync()

    # --- health (cluster/health.py) --------------------------------------------
    def dead_ranks(self) -> dict[int, str]:
        """Ranks whose engine died or is unresponsive: {rank: how}."""
        return self.health.dead_ranks()

    def check_health(self) -> dict[int, str]:
        """Look for dead or unresponsive ranks now and record them; return them."""
        return self.health.check()

    def mark_dead(self, ranks: dict[int, str]) -> None:
        """Record dead ranks: the cluster needs a restart before the next cell."""
        self.health.mark_dead(ranks)

    def resumed_ranks(self) -> list[int]:
        """Unresponsive ranks running again, which the cluster replaces by itself."""
        return self.health.resumed_ranks()

    # --- steps of start --------------------------------------------------------
    def _make_ipp_cluster(self) -> ipp.Cluster:
        spec = self.spec
        engines, config = spec.engines.engine_launcher(spec)
        return PrivateCluster(
            config=Config(config),
            n=spec.n,
            controller_ip=spec.ip,
            controller_launcher_class=OurControllerLauncher,
            engine_launcher_class=engines,
            controller_args=controller_args(spec),
            log_level=logging.ERROR,
            profile_dir=own_profile_dir(self.id),
        )

    def engine_env(self, rank_offset: int = 0) -> dict[str, str]:
        spec = self.spec
        threads = str(spec.resolved_threads)
        env = {
            envvars.WORLD_SIZE: str(spec.n),
            "WORLD_SIZE": str(spec.n),
            "LOCAL_WORLD_SIZE": str(spec.engines.ranks_per_host(spec)),
            "MASTER_ADDR": spec.ip,
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            envvars.RANK_OFFSET: str(rank_offset),
            "PYTHONUNBUFFERED": "1",
            envvars.STACK_DIR: self.stack_dir,
        }
        if spec.gpus:
            env[envvars.DEVICES] = ",".join(str(g) for g in spec.gpus)
        else:
            env[envvars.CPU] = "1"
        env = spec.engines.engine_env(spec, env)
        env.update(spec.extra_engine_env)
        return env

    async def _replace(self, dead: dict[int, str], old: set[int]) -> None:
        """Start one engine per dead rank, with that rank, beside the survivors."""
        survivors = [r.engine_id for r in self.ranks if r.rank not in dead]
        # An unresponsive engine's process may live (stopped): end it first, which also
        # frees its peers blocked in a collective with it, and let its exit be recorded.
        stuck = reap.process_tree([r.pid for r in self.ranks if r.rank in dead])
        for proc in stuck:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        await asyncio.get_running_loop().run_in_executor(None, reap.reap, stuck, 2.0)
        await self._exits_recorded({p.pid for p in stuck}, 5.0)
        for rank in sorted(dead):
            self.progress(f"replacing rank {rank} ({dead[rank]})")
            await self._start_engines(1, rank)
        self.health.bury_exits()
        await self.wait_for_engines(old, len(dead))
        await self._setup_ranks(survivors + sorted(set(self.client.ids) - old))  # type: ignore[union-attr]

    async def _exits_recorded(self, pids: set[int], timeout: float) -> None:
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

    async def _start_engines(self, count: int | None = None, rank_offset: int = 0) -> None:
        count = self.n if count is None else count
        self.progress(f"starting {count} engine{'s' if count > 1 else ''}")
        await self.start_engines(count, rank_offset)

    async def start_engines(
        self,
        count: int,
        rank_offset: int = 0,
        *,
        env: dict[str, str] | None = None,
        traits: dict[str, Any] | None = None,
    ) -> str:
        """Start one engine set of *count* engines, ranks from *rank_offset*; its id.

        By default the engines get the cluster's own environment (``engine_env``). With
        *env* (and *traits* of its launcher: a scale's engine set, ``scale_starts``) the
        set is one beside others: its id is chosen before it starts and given to its
        engines, so each can tell which set it came from (``rankenv.origin``)."""
        assert self._ipp is not None
        extra: dict[str, Any] = dict(traits or {})
        if env is None:
            env = self.engine_env(rank_offset)
        else:
            set_id = privates.new_engine_set_id(self._ipp)
            env = {**env, envvars.ENGINE_SET: set_id}
            extra["engine_set_id"] = set_id
        # (ipp.Cluster has no engine_args trait: it must go to the engine launcher.)
        self._engine_set = await self._ipp.start_engines(
            count, environment=env, engine_args=engine_args(self.spec), **extra
        )
        self._engine_sets.append(self._engine_set)
        self._owner_only_files()
        return self._engine_set

    async def stop_engine_sets(self, set_ids: list[str]) -> None:
        """Stop these engine sets together (each stop waits for its launcher: an
        mpiexec's exit, a Slurm job's cancel) and forget them."""
        assert self._ipp is not None
        await asyncio.gather(*(self._ipp.stop_engines(s) for s in set_ids))
        for set_id in set_ids:
            self._engine_sets.remove(set_id)

    async def drop_engine_set(self, set_id: str) -> None:
        """Stop an engine set that failed to start, and forget it either way (a
        launcher whose host cannot be reached cannot be stopped; nothing runs there)."""
        assert self._ipp is not None
        try:
            await self._ipp.stop_engines(set_id)
        except Exception as e:  # the host is unreachable: its engine never started
            log.info("engine set %s that failed: %s", set_id, e)
        self._ipp.engines.pop(set_id, None)
        if set_id in self._engine_sets:
            self._engine_sets.remove(set_id)

    def configure_engine_launcher(self) -> None:
        """The engine launcher's configuration follows the spec as it is now (after a
        scale): a later ``restart`` starts the cluster so, in one engine set."""
        assert self._ipp is not None
        _, config = self.spec.engines.engine_launcher(self.spec)
        for name, traits in config.items():
            section = self._ipp.config[name]
            if not isinstance(section, Config):
                section = self._ipp.config[name] = Config()
            section.update(traits)

    def _owner_only_files(self) -> None:
        """ipyparallel creates the logs with the default umask (world-readable); they
        hold the ranks' output, which may hold the user's data: owner only."""
        assert self._ipp is not None
        for path in reap.cluster_files(self._ipp.profile_dir, self._ipp.cluster_id):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(path, 0o600)

    async def wait_for_engines(self, old: set[int], count: int) -> None:
        assert self.client is not None
        deadline = time.monotonic() + self.spec.start_timeout
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
                    f"only {seen} of {count} engines registered within "
                    f"{self.spec.start_timeout:.0f} s; see the engine logs in "
                    f"{self.profile_dir}/log"
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
            log.info("cluster %s: a fresh client sees engines %s", self.id, fresh.ids)
            stale, self.client = self.client, fresh
            stale.close()
        else:
            fresh.close()

    def _check_engines_alive(self) -> None:
        """Fail fast, with the engine's own output, when an engine exits while starting."""
        assert self._ipp is not None
        engine_set = self._ipp.engines.get(self._engine_set or "")
        exited = (getattr(engine_set, "stop_data", None) or {}).get("engines", {})
        for identifier, data in exited.items():
            output = getattr(engine_set, "outputs", {}).get(identifier) or ""
            tail = "\n".join(output.splitlines()[-20:]) or "(no output)"
            raise ClusterError(
                f"engine {identifier} exited while starting ({data.get('exit_code')}):\n{tail}"
            )

    async def _setup_ranks(self, ids: list[int]) -> None:
        """Learn which engine (of *ids*) holds which rank, then create the process group."""
        client = self.client
        assert client is not None
        if not self.spec.engines.on_this_machine:
            ranks, self.master_addr = await ranks_across_hosts(client, ids, RankInfo)
            self.update(ranks=ranks)
            await self.init_group()
            return
        infos = await asyncio.wrap_future(client[ids].apply_async(group.rank_info))
        try:
            order = local_ranks(infos, self.n)
        except PlacementError as e:
            raise ClusterError(str(e)) from None
        self.update(
            ranks=[
                RankInfo(rank, ids[at], infos[at]["host"], infos[at]["pid"], infos[at]["device"])
                for at, rank in order
            ]
        )
        await self.init_group()

    async def init_group(self) -> None:
        """(Re-)create the default process group on every rank."""
        client = self.client
        assert client is not None
        self._generation += 1
        spec = self.spec
        self.progress(f"creating the {self.backend} process group")
        addr = self.master_addr or spec.ip  # rank 0's own address on remote hosts
        rank0 = self.engine_ids([0])[0]
        # Every rank has torch loaded before anyone enters the rendezvous: a replaced
        # rank's import takes ~2 s, 30 s+ on a loaded host, and its peers' rendezvous
        # timeout must count only the group's creation.
        loaded = client[self.engine_ids()].apply_async(group.load_torch)
        try:
            await asyncio.wait_for(asyncio.wrap_future(loaded), spec.start_timeout)
        except ipp.error.CompositeError as e:
            raise ClusterError(
                f"a rank cannot import torch: {_first_error(e)}; check the engines' "
                "environment, then %dist_cluster restart"
            ) from None
        except asyncio.TimeoutError:
            raise ClusterError(
                f"the ranks did not load torch within {spec.start_timeout:.0f} s; the host "
                "may be overloaded: %dist_cluster restart"
            ) from None
        port = await asyncio.wrap_future(
            client[rank0].apply_async(group.host_store, addr, spec.timeout)
        )
        ar = client[self.engine_ids()].apply_async(
            group.init_group, addr, port, self.backend, spec.timeout, self._generation
        )
        try:
            await asyncio.wait_for(asyncio.wrap_future(ar), spec.timeout + 60)
        except ipp.error.CompositeError as e:
            raise ClusterError(
                f"creating the {self.backend} process group failed: {_first_error(e)}; "
                "try %dist_cluster restart, or --backend gloo"
            ) from None
        except asyncio.TimeoutError:
            raise ClusterError(
                f"creating the process group took longer than {spec.timeout + 60:.0f} s; "
                "check that every rank can reach rank 0, then %dist_cluster restart"
            ) from None
        # Every rank's transport ports, so recovery can sever a stuck collective.
        self.pair_ports = sorted({p for result in ar.get() for p in result.get("ports", [])})
        self.update(ranks=[replace(r, backend=self.backend) for r in self.ranks])

    def local_pids(self) -> list[int]:
        """Pids of the processes this kernel started: controller and local engines."""
        if self._ipp is None:
            return []
        pids = []
        controller = self._ipp.controller
        if controller is not None and getattr(controller, "process", None) is not None:
            pids.append(controller.process.pid)
        if self.spec.engines.on_this_machine:
            for engine_set in self._ipp.engines.values():
                for launcher in getattr(engine_set, "launchers", {}).values():
                    if getattr(launcher, "process", None) is not None:
                        pids.append(launcher.process.pid)
        return pids

    async def _teardown(self) -> None:
        self._tearing_down = True
        local = self.spec.engines.on_this_machine
        writers = [r.pid for r in self.ranks if r.pid] if local else []
        try:
            await self._stop_everything()
        finally:
            self._tearing_down = False
            # What the ranks left in /dev/shm (a pull a rank wrote for a cell that
            # was interrupted): their processes are gone, so the files can go.
            shm.remove_files_of(writers)

    async def _stop_everything(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self._ipp is not None:
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
            reap.remove_files(reap.cluster_files(self._ipp.profile_dir, self._ipp.cluster_id))
            try:
                await self._ipp.stop_cluster()
            except Exception as e:  # a process already gone is fine; say anything else
                log.warning("stopping the ipyparallel cluster: %s", e)
            # In this loop's thread: at interpreter exit no executor takes new work.
            left = reap.reap(tree)
            if left:
                log.warning("processes of cluster %s could not be ended: %s", self.id, left)
            reap.remove_files(reap.cluster_files(self._ipp.profile_dir, self._ipp.cluster_id))
            if self._ipp.profile_dir == own_profile_dir(self.id):
                shutil.rmtree(self._ipp.profile_dir, ignore_errors=True)

    # --- run store -------------------------------------------------------------
    def writer(self) -> StoreWriter | None:
        """The run store's writer, or None when the store cannot be written: then the
        cluster and its runs go on unrecorded, and that is said once, not per write."""
        if self._store is None and self._store_error is None:
            try:
                self._store = StoreWriter()
                self._store.close_orphans(lambda pid: psutil.pid_exists(pid) and pid != 0)
            except StoreError as e:
                self._store_error = str(e)
                log.warning("%s; this cluster and its runs will not be recorded", e)
        return self._store

    def _record_cluster(self) -> None:
        assert self._ipp is not None
        record(
            self.writer(),
            "add_cluster",
            self.id,
            n=self.n,
            backend=self.backend,
            kernel_pid=os.getpid(),
            profile_dir=self._ipp.profile_dir,
            ipp_cluster_id=self._ipp.cluster_id,
        )

    # --- the one door of its facts (facts.py) --------------------------------------
    def move(
        self,
        new: ClusterState,
        *,
        spec: ClusterSpec | None = None,
        ranks: Iterable[RankInfo] | None = None,
        failure: str | None | Keep = KEEP,
        only_from: Iterable[ClusterState] | None = None,
    ) -> bool:
        """The one way this cluster's state and the facts that travel with it change:
        checked against ``protocol.TRANSITIONS`` (IllegalMove otherwise: a bug of ours),
        under the cluster's lock, and recorded in the run store in the same step, so
        memory and store never disagree (``ClusterFacts.move``)."""
        return self.facts.move(new, spec=spec, ranks=ranks, failure=failure, only_from=only_from)

    def update(
        self, *, spec: ClusterSpec | None = None, ranks: Iterable[RankInfo] | None = None
    ) -> None:
        """Change the spec or the rank table in the state the cluster is in now."""
        self.facts.update(spec=spec, ranks=ranks)

    def move_rank(self, rank: int, new: EngineState | str) -> bool:
        """Move one rank's state, checked and recorded (``ClusterFacts.move_rank``)."""
        return self.facts.move_rank(rank, new)

    def __repr__(self) -> str:
        return f"<DistCluster {self.id} {self.state.value} n={self.n} backend={self.backend}>"


def own_profile_dir(cluster_id: str) -> str:
    """The cluster's own ipyparallel profile directory, beside the run store (per user,
    owner-only), never one of the user's IPython profiles: ipyparallel's own panel, its
    logs and cluster files, and other kernels' clusters never mix with it.

    Where the store's directory cannot be written (a read-only one: the store never
    stops a cluster), the profile goes to a per-user folder in the temporary directory.
    The per-user folders there are made owner-only, or reused only when they are this
    user's and private (dist_notebook.privatedir): a folder another user planted in
    advance is refused, never used.
    """
    fallback = Path(tempfile.gettempdir()) / f"dist-notebook-{os.getuid()}"
    for top, base in ((None, store_path().parent / "ipython"), (fallback, fallback / "ipython")):
        profile = base / f"cluster-{cluster_id}"
        try:
            if top is not None:
                private_dir(top)
            private_dir(base)  # the folder that keeps others out of what is inside
            profile.mkdir(exist_ok=True, mode=0o700)  # fails on a read-only directory
        except OSError as e:
            log.debug("no profile directory in %s: %s", base, e)
            continue
        except UnsafeDirectoryError as e:
            raise ClusterError(str(e)) from None
        return str(profile)
    raise ClusterError(
        f"cannot create a profile directory for the cluster in {store_path().parent} or "
        f"{fallback}: set {envvars.STORE} to a file in a directory you can write"
    )


def _first_error(e: ipp.error.CompositeError) -> str:
    first = e.elist[0]
    return f"{first[0]}: {first[1]}"
