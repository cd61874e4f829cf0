"""A cluster of engines with torch.distributed wired: the kernel-side lifecycle.

    cluster = DistCluster(ClusterSpec(n=2))      # CPU ranks with gloo
    cluster.start_sync()                         # or: await cluster.start()
    cluster.execute("print(rank, world_size)")
    cluster.stop_sync()                          # idempotent; also runs at exit

States (``ClusterState``): new -> starting -> ready; ready -> restarting -> ready;
starting/restarting -> failed; any -> stopping -> stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

import ipyparallel as ipp

from ..engine import group
from ..store import StoreError, StoreWriter
from . import registry
from .launchers import OurControllerLauncher, RankEngineSetLauncher, REMOTE_ENGINE_LAUNCHERS
from .loop import run_sync
from .spec import ClusterSpec

log = logging.getLogger("dist_notebook")
Progress = Callable[[str], None]


class ClusterState(str, Enum):
    NEW = "new"
    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"
    FAILED = "failed"
    DEGRADED = "degraded"  # a rank died; restart to replace it
    STOPPING = "stopping"
    STOPPED = "stopped"


class ClusterError(RuntimeError):
    """The cluster could not do what was asked; the message says why and what to do."""


@dataclass
class RankInfo:
    rank: int
    engine_id: int
    host: str
    pid: int
    device: str
    backend: str = ""
    state: str = "idle"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        self.spec = spec or ClusterSpec()
        self.id = uuid.uuid4().hex[:8]
        self.state = ClusterState.NEW
        self.ranks: list[RankInfo] = []
        self.backend = self.spec.resolved_backend
        self.client: ipp.Client | None = None
        self.progress: Progress = progress or _quiet
        self.start_seconds: float | None = None
        self._ipp: ipp.Cluster | None = None
        self._generation = 0
        self._store = store
        self._engine_set: str | None = None

    # --- properties ------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.spec.n

    @property
    def profile_dir(self) -> str:
        return self._ipp.profile_dir if self._ipp else ""

    def engine_ids(self, ranks: list[int] | None = None) -> list[int]:
        """ipyparallel engine ids for *ranks* (all ranks by default), in rank order."""
        by_rank = {r.rank: r.engine_id for r in self.ranks}
        wanted = sorted(by_rank) if ranks is None else ranks
        missing = [r for r in wanted if r not in by_rank]
        if missing:
            raise ClusterError(
                f"unknown rank {missing[0]}: this cluster has ranks 0..{self.n - 1}"
            )
        return [by_rank[r] for r in wanted]

    def rank_of(self, engine_id: int) -> int:
        for r in self.ranks:
            if r.engine_id == engine_id:
                return r.rank
        return -1

    def dead_ranks(self) -> dict[int, str]:
        """Ranks whose local engine process has exited: {rank: how it ended}.

        The launcher notices an exit at once (its wait thread); engines of remote
        launchers are declared dead by ipyparallel's heartbeat instead.
        """
        if self._ipp is None:
            return {}
        engine_set = self._ipp.engines.get(self._engine_set or "")
        if engine_set is None:
            return {}
        offset = int(engine_set.environment.get("DIST_NOTEBOOK_RANK_OFFSET", "0"))
        dead = {}
        # The engine set moves a launcher's exit record here as soon as it exits.
        for identifier, data in dict(engine_set.stop_data.get("engines", {})).items():
            code = data.get("exit_code")
            if isinstance(code, int) and code < 0:
                how = f"signal {signal.Signals(-code).name}"
            else:
                how = f"exit code {code}"
            dead[int(identifier) + offset] = how
        return dead

    def mark_dead(self, ranks: dict[int, str]) -> None:
        """Record dead ranks: the cluster needs a restart before the next cell."""
        for info in self.ranks:
            if info.rank in ranks:
                info.state = "dead"
                writer = self.writer()
                if writer:
                    try:
                        writer.set_rank_state(self.id, info.rank, "dead")
                        writer.add_event("rank-died", ranks[info.rank], cluster_id=self.id, rank=info.rank)
                    except StoreError as e:
                        log.warning("%s", e)
        if ranks and self.state == ClusterState.READY:
            self.state = ClusterState.DEGRADED
            self._store_state("degraded")

    def require_ready(self) -> ipp.Client:
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
        t0 = time.perf_counter()
        self.state = ClusterState.STARTING
        registry.add(self)
        try:
            self._ipp = self._make_ipp_cluster()
            self.progress(f"starting controller on {self.spec.ip}")
            await self._ipp.start_controller()
            self._record_cluster()
            await self._start_engines()
            self.client = await self._ipp.connect_client()
            await self._wait_for_engines(set())
            await self._setup_ranks()
        except BaseException:
            self.state = ClusterState.FAILED
            await self._teardown()
            self._store_state("failed")
            raise
        self.state = ClusterState.READY
        self.start_seconds = time.perf_counter() - t0
        self._store_state("ready")
        return self

    def start_sync(self) -> DistCluster:
        return run_sync(self.start())

    async def restart(self) -> DistCluster:
        """Replace every engine (new processes, same ranks) and re-create the group."""
        if self._ipp is None or self.client is None:
            raise ClusterError("no cluster to restart: run %dist_cluster start")
        for info in self.ranks:
            info.state = "idle"
        t0 = time.perf_counter()
        self.state = ClusterState.RESTARTING
        self._store_state("restarting")
        old = set(self.client.ids)
        try:
            self.progress("stopping engines")
            await self._ipp.stop_engines()
            await self._start_engines()
            await self._wait_for_engines(old)
            await self._setup_ranks()
        except BaseException:
            self.state = ClusterState.FAILED
            self._store_state("failed")
            raise
        self.state = ClusterState.READY
        self.start_seconds = time.perf_counter() - t0
        self._store_state("ready")
        return self

    def restart_sync(self) -> DistCluster:
        return run_sync(self.restart())

    async def stop(self) -> None:
        """Stop engines and controller; calling it again does nothing."""
        if self.state in (ClusterState.NEW, ClusterState.STOPPED):
            return
        self.state = ClusterState.STOPPING
        await self._teardown()
        self.state = ClusterState.STOPPED
        self._store_state("stopped")
        registry.discard(self)

    def stop_sync(self) -> None:
        run_sync(self.stop())

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

    # --- steps of start --------------------------------------------------------
    def _make_ipp_cluster(self) -> ipp.Cluster:
        spec = self.spec
        engines: Any = RankEngineSetLauncher
        if spec.launcher != "local":
            engines = REMOTE_ENGINE_LAUNCHERS[spec.launcher]
        return ipp.Cluster(
            n=spec.n,
            controller_ip=spec.ip,
            controller_launcher_class=OurControllerLauncher,
            engine_launcher_class=engines,
            controller_args=[f"--HeartMonitor.period={spec.heartbeat_ms}"],
            log_level=logging.ERROR,
        )

    def _engine_env(self, rank_offset: int = 0) -> dict[str, str]:
        spec = self.spec
        threads = str(spec.resolved_threads)
        env = {
            "DIST_NOTEBOOK_WORLD_SIZE": str(spec.n),
            "WORLD_SIZE": str(spec.n),
            "LOCAL_WORLD_SIZE": str(spec.n if spec.launcher == "local" else 1),
            "MASTER_ADDR": spec.ip,
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "DIST_NOTEBOOK_RANK_OFFSET": str(rank_offset),
            "DIST_NOTEBOOK_CLUSTER": self.id,
            "PYTHONUNBUFFERED": "1",
        }
        if spec.gpus:
            env["DIST_NOTEBOOK_DEVICES"] = ",".join(str(g) for g in spec.gpus)
        else:
            env["DIST_NOTEBOOK_CPU"] = "1"
        if spec.launcher == "local":
            env["DIST_NOTEBOOK_PARENT_PID"] = str(os.getpid())
        env.update(spec.extra_engine_env)
        return env

    async def _start_engines(self) -> None:
        assert self._ipp is not None
        self.progress(f"starting {self.n} engines")
        self._engine_set = await self._ipp.start_engines(
            self.n,
            environment=self._engine_env(),
            # Engines leave by themselves ~10 heartbeats after the controller is gone.
            # (ipp.Cluster has no engine_args trait: it must go to the engine launcher.)
            engine_args=["--IPEngine.max_heartbeat_misses=10"],
        )

    async def _wait_for_engines(self, old: set[int]) -> None:
        assert self.client is not None
        deadline = time.monotonic() + self.spec.start_timeout
        seen = -1
        while True:
            new = [i for i in self.client.ids if i not in old]
            if len(new) != seen:
                seen = len(new)
                self.progress(f"engines registered: {seen}/{self.n}")
            if seen >= self.n:
                return
            self._check_engines_alive()
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"only {seen} of {self.n} engines registered within "
                    f"{self.spec.start_timeout:.0f} s; see the engine logs in {self.profile_dir}/log"
                )
            await asyncio.sleep(0.05)

    def _check_engines_alive(self) -> None:
        """Fail fast, with the engine's own log, when an engine process exits at boot."""
        assert self._ipp is not None
        engine_set = self._ipp.engines.get(self._engine_set or "")
        for launcher in getattr(engine_set, "launchers", {}).values():
            if launcher.state == "after":
                tail = _log_tail(getattr(launcher, "output_file", ""))
                raise ClusterError(f"an engine exited while starting:\n{tail}")

    async def _setup_ranks(self) -> None:
        """Learn which engine holds which rank, then create the process group."""
        client = self.client
        assert client is not None
        ids = sorted(client.ids)[-self.n :]
        infos = await asyncio.wrap_future(client[ids].apply_async(group.rank_info))
        ranks = []
        for position, (eid, info) in enumerate(zip(ids, infos, strict=True)):
            # A plain ipengine without launcher variables gets its rank by registration order.
            rank = info["rank"] if info["rank"] >= 0 else position
            ranks.append(RankInfo(rank, eid, info["host"], info["pid"], info["device"]))
        ranks.sort(key=lambda r: r.rank)
        if [r.rank for r in ranks] != list(range(self.n)):
            raise ClusterError(f"engines report ranks {[r.rank for r in ranks]}, not 0..{self.n - 1}")
        self.ranks = ranks
        await self.init_group()

    async def init_group(self) -> None:
        """(Re-)create the default process group on every rank."""
        client = self.client
        assert client is not None
        self._generation += 1
        spec = self.spec
        self.progress(f"creating the {self.backend} process group")
        addr = spec.ip
        rank0 = self.engine_ids([0])[0]
        port = await asyncio.wrap_future(
            client[rank0].apply_async(group.host_store, addr, spec.timeout)
        )
        ar = client[self.engine_ids()].apply_async(
            group.init_group, addr, port, self.backend, spec.timeout, self._generation
        )
        try:
            # The first creation also waits for the background torch import (~2 s).
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
        for r in self.ranks:
            r.backend = self.backend
        self._record_ranks()

    async def _teardown(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self._ipp is not None:
            try:
                await self._ipp.stop_cluster()
            except Exception as e:  # a process already gone is fine; say anything else
                log.warning("stopping the ipyparallel cluster: %s", e)

    # --- run store -------------------------------------------------------------
    def writer(self) -> StoreWriter | None:
        if self._store is None:
            try:
                self._store = StoreWriter()
            except StoreError as e:
                log.warning("%s; cluster state will not be recorded", e)
                return None
        return self._store

    def _record_cluster(self) -> None:
        writer = self.writer()
        if writer and self._ipp is not None:
            writer.add_cluster(
                self.id,
                n=self.n,
                backend=self.backend,
                kernel_pid=os.getpid(),
                profile_dir=self._ipp.profile_dir,
                ipp_cluster_id=self._ipp.cluster_id,
            )

    def _record_ranks(self) -> None:
        writer = self.writer()
        if writer:
            writer.set_ranks(self.id, [r.to_dict() for r in self.ranks])

    def _store_state(self, state: str) -> None:
        writer = self.writer()
        if writer:
            try:
                writer.set_cluster_state(self.id, state, self.backend)
                if state in ("stopped", "failed"):
                    for r in self.ranks:
                        writer.set_rank_state(self.id, r.rank, "stopped")
            except StoreError as e:
                log.warning("%s", e)

    def __repr__(self) -> str:
        return f"<DistCluster {self.id} {self.state.value} n={self.n} backend={self.backend}>"


def _first_error(e: ipp.error.CompositeError) -> str:
    first = e.elist[0]
    return f"{first[0]}: {first[1]}"


def _log_tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no engine log)"
