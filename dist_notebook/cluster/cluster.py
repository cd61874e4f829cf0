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

import errno
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterable
from typing import Any

from ..engine import shm
from ..protocol import ClusterState, EngineState
from ..store import StoreWriter, store_path
from ..store.recorder import LazyWriter, record
from ..store.schema import full_disk_message
from . import limits, registry, wiring
from . import scale as scaling
from .errors import ClusterError
from .facts import KEEP, ClusterFacts, Keep, RankInfo
from .health import Health
from .ippengines import Engines
from .loop import sync_twin
from .owner import ClusterOwner
from .profiles import stacks_dir
from .spec import ClusterConfigError, ClusterSpec
from .view import ClusterView, Progress

log = logging.getLogger("dist_notebook")


def _quiet(_: str) -> None:
    """The default progress sink: say nothing."""


class DistCluster(ClusterView):
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
        self.progress: Progress = progress or _quiet
        # The controller, the engine sets and the client (cluster/ippengines.py).
        self.engines = Engines(self.id, lambda: self.spec, self._say)
        self.start_seconds: float | None = None
        self.ready_since: float | None = None  # time.time() of this life's ready
        self._generation = 0
        self._store = LazyWriter(store, "this cluster and its runs will not be recorded")
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

    def _say(self, text: str) -> None:
        """Progress of the engines, to whoever listens now (a cell sets its own)."""
        self.progress(text)

    # --- properties ------------------------------------------------------------
    @property
    def profile_dir(self) -> str:
        return self.engines.profile_dir

    @property
    def client_file(self) -> str:
        """The ipyparallel client's connection file of the started cluster ("" before the
        start): another process opens it (``ipyparallel.Client(path)``) to run cells on
        these engines, as a kernel attached to a detached cluster does. It holds the
        cluster's key; it lives in the cluster's own profile folder (owner-only)."""
        return self.engines.client_file

    @property
    def tearing_down(self) -> bool:
        """Engines and controller are being stopped by the cluster itself."""
        return self._tearing_down

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
            await self.engines.start_controller(self.health.controller_stopped)
            self._record_cluster()
            await self._start_engines()
            await self.engines.connect()
            await self.engines.wait_for_engines(set(), self.n)  # may take a fresh client
            await self._setup_ranks(sorted(self.require_client().ids))
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
        # Kept over a restart; only local ranks are asked for their stacks.
        if not (self.stack_dir and os.path.isdir(self.stack_dir)):
            self.stack_dir = stacks_dir(self.id) if self.spec.engines.on_this_machine else ""

    def _remove_stack_dir(self) -> None:
        if self.stack_dir:
            shutil.rmtree(self.stack_dir, ignore_errors=True)

    def ready_after(self, t0: float) -> DistCluster:
        """Ready (again) after a start, restart or scale that began at *t0*."""
        self.start_seconds = time.perf_counter() - t0
        self.ready_since = time.time()
        self.move(ClusterState.READY)
        self.owner.watch()  # the panel's Stop and Interrupt reach this life of it
        self.engines.owner_only_files()  # the engine-set file is written once engines run
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
        if self.client is None:
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
        old = set(self.require_client().ids)
        try:
            if dead:
                await self._replace(dead, old)
            else:
                self.progress("stopping engines")
                await self.engines.stop_engine_sets()
                await self._start_engines()
                await self.engines.wait_for_engines(old, self.n)
                await self._setup_ranks(sorted(set(self.require_client().ids) - old))
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

    async def __aenter__(self) -> DistCluster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __enter__(self) -> DistCluster:
        return self.start_sync()

    def __exit__(self, *exc: object) -> None:
        self.stop_sync()

    # --- what differs from a detached cluster (cluster/kind.py) ---------------------
    detached = False
    keeper_pid: int | None = None  # (a detached cluster's keeper process)
    idle_timeout: float | None = None  # (a detached cluster stops after so long unused)

    def refresh(self) -> Any:
        """Nothing: this kernel keeps the facts itself."""

    def keeper_run(self, spec: object) -> Any:
        return None  # this kernel runs it

    def detach(self) -> None:
        raise ClusterError(
            "this kernel holds no detached cluster (start one with %dist_cluster start --detach)"
        )

    # --- health (cluster/health.py) --------------------------------------------
    def dead_ranks(self) -> dict[int, str]:
        """Ranks whose engine died or is unresponsive: {rank: how}."""
        return self.health.dead_ranks()

    def mark_dead(self, ranks: dict[int, str]) -> None:
        """Record dead ranks: the cluster needs a restart before the next cell."""
        self.health.mark_dead(ranks)

    # --- steps of start --------------------------------------------------------
    def engine_env(self, rank_offset: int = 0) -> dict[str, str]:
        """The environment of engines started for ranks from *rank_offset*."""
        return wiring.rank_env(self.spec, self.stack_dir, rank_offset)

    async def _replace(self, dead: dict[int, str], old: set[int]) -> None:
        """Start one engine per dead rank, with that rank, beside the survivors."""
        survivors = [r.engine_id for r in self.ranks if r.rank not in dead]
        # An unresponsive engine's process may live (stopped): end it first, which also
        # frees its peers blocked in a collective with it.
        await self.engines.end_processes([r.pid for r in self.ranks if r.rank in dead])
        for rank in sorted(dead):
            self.progress(f"replacing rank {rank} ({dead[rank]})")
            await self._start_engines(1, rank)
        self.health.bury_exits()
        await self.engines.wait_for_engines(old, len(dead))
        added = sorted(set(self.require_client().ids) - old)
        await self._setup_ranks(survivors + added)

    async def _start_engines(self, count: int | None = None, rank_offset: int = 0) -> None:
        count = self.n if count is None else count
        self.progress(f"starting {count} engine{'s' if count > 1 else ''}")
        await self.engines.start_engines(count, self.engine_env(rank_offset))

    async def _setup_ranks(self, ids: list[int]) -> None:
        """Learn which engine (of *ids*) holds which rank, then create the process group."""
        ranks, addr = await wiring.place(self.require_client(), ids, self.spec)
        if addr is not None:
            self.master_addr = addr
        self.update(ranks=ranks)
        await self.init_group()

    async def _teardown(self) -> None:
        self._tearing_down = True
        local = self.spec.engines.on_this_machine
        writers = [r.pid for r in self.ranks if r.pid] if local else []
        try:
            await self.engines.stop_all()
        finally:
            self._tearing_down = False
            # What the ranks left in /dev/shm (a pull a rank wrote for a cell that
            # was interrupted): their processes are gone, so the files can go.
            shm.remove_files_of(writers)

    # --- run store -------------------------------------------------------------
    def writer(self) -> StoreWriter | None:
        """The run store's writer, or None when the store cannot be written: then the
        cluster and its runs go on unrecorded, and that is said once, not per write."""
        return self._store.get()

    def _record_cluster(self) -> None:
        record(
            self.writer(),
            "add_cluster",
            self.id,
            n=self.n,
            backend=self.backend,
            kernel_pid=os.getpid(),
            profile_dir=self.engines.profile_dir,
            ipp_cluster_id=self.engines.ipp_cluster_id,
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
