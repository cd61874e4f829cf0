"""Ranks on other hosts (ssh, mpi, slurm): how their scale removes, then adds engines.

What the three remote launchers share: a scale asks every engine where it came from
(``rankenv.origin``: its host, its engine set, its launcher rank), stops the engines
that leave, then starts the engine sets that add the new ranks (``scale_starts``, one
per launcher), and ends with the launcher's configuration following the new layout, so
a later restart starts it again. A grow that fails leaves nothing half-grown: the
cluster goes on with the ranks it kept (``GrowError``).

What differs stays in each launcher's file: the layout the user gives on hosts
(``HostListEngines`` here, for ssh and mpi) against the newest ranks leaving first
(Slurm), how an engine is stopped alone (ssh: its own ssh; mpi, Slurm: ipyparallel's
shutdown request), and which host an engine runs on where it does not say (mpi).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from abc import abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import GrowError, ScaleError
from ..hosts import HostsError, format_hosts, parse_hosts
from ..placement import (
    PlacementError,
    asked_layout,
    growth,
    host_counts,
    host_layout,
    leaving_by_host,
    newest_ranks,
)
from .base import EnginesStrategy, Resized, ScalePlan, Start

if TYPE_CHECKING:
    from ..cluster import RankInfo
    from ..scale import Scalable
    from ..spec import ClusterSpec

LEAVE_TIMEOUT = 30.0  # seconds for removed engines to leave the controller


class RemoteEngines(EnginesStrategy):
    """Engines started on other hosts by a launcher the kernel cannot see into."""

    # --- the plan ------------------------------------------------------------------
    async def plan_scale(self, cluster: Scalable, n: int, hosts: str | None) -> ScalePlan | None:
        origins = await origins_of(cluster)
        target = self.target_layout(cluster, origins, n, hosts)
        if target:
            if target == self.current_layout(cluster, origins):
                return None
            n = sum(target.values())
        elif n == cluster.n:
            return None
        return ScalePlan(n, origins, target)

    def target_layout(
        self, cluster: Scalable, origins: dict[int, dict[str, Any]], n: int, hosts: str | None
    ) -> dict[str, int]:
        """Every host's rank count after the scale, where the user lays out hosts; {}
        (the launcher picks the hosts)."""
        return {}

    def current_layout(
        self, cluster: Scalable, origins: dict[int, dict[str, Any]]
    ) -> dict[str, int]:
        """{host: ranks} now, where the user lays out hosts; {} otherwise."""
        return {}

    def leaving(self, cluster: Scalable, plan: ScalePlan) -> list[RankInfo]:
        """The ranks that go: the newest first (the last engine set's highest ranks)."""
        sets = {r.rank: plan.origins[r.engine_id]["set"] for r in cluster.ranks}
        order = [set_id for set_id, _ in cluster.engines.engine_sets()]
        going = set(newest_ranks(sets, order, cluster.n - plan.n))
        return [r for r in cluster.ranks if r.rank in going]

    def grow_where(self, grow: dict[str, int]) -> str:
        """Where the added ranks start, for messages (*grow*: ranks added per host)."""
        return f"on {format_hosts(tuple(grow.items()))}"

    @abstractmethod
    def scale_starts(
        self,
        spec: ClusterSpec,
        added: int,
        target: dict[str, int],
        have: dict[str, int],
        base_env: dict[str, str],
    ) -> list[Start]:
        """The engine sets that add *added* ranks: *target* is every host's rank count
        after the scale (ssh, mpi; empty otherwise), *have* what each has now."""

    def engine_stopper(self, engine_set: Any, host: str, pid: int) -> Any:
        """The launcher that stops the one engine *pid* on *host* by a signal, or None:
        the engine then leaves through ipyparallel's shutdown request."""
        return None

    # --- the change ----------------------------------------------------------------
    async def resize(self, cluster: Scalable, plan: ScalePlan) -> Resized:
        previous = list(dict.fromkeys(r.host for r in cluster.ranks))
        try:
            ids, kept = await self._remove_then_add(cluster, plan)
        except GrowError as e:
            if not e.kept:
                raise
            return Resized(e.kept, previous, set(e.kept), failed=e)
        return Resized(ids, previous, kept)

    async def _remove_then_add(
        self, cluster: Scalable, plan: ScalePlan
    ) -> tuple[list[int], set[int]]:
        """Remove, then add engines through the launcher; return (engine ids, kept ids)."""
        n, target = plan.n, plan.target
        leaving = self.leaving(cluster, plan)
        if leaving:
            await self._remove(cluster, leaving, plan.origins)
        gone = {r.engine_id for r in leaving}
        kept = [r.engine_id for r in cluster.ranks if r.engine_id not in gone]
        spec = cluster.spec
        have = self._layout_of(cluster, plan.origins, kept) if target else {}
        hosts = tuple(target.items()) if target else spec.hosts
        cluster.update(
            spec=dataclasses.replace(spec, n=n, hosts=hosts, scaled=True),
            ranks=[r for r in cluster.ranks if r.engine_id not in gone],
        )
        added = n - len(kept)
        new: list[int] = []
        if added > 0:
            client = cluster.require_client()
            before = set(client.ids)
            launched = cluster.engines.launched_engine_sets()
            try:
                await self._add(cluster, added, target, have)
                await cluster.engines.wait_for_engines(before, added)
            except Exception as e:
                # Nothing half-grown stays behind (a Slurm job still pending, engines that
                # did start): the cluster goes on with the ranks it kept.
                for set_id in sorted(cluster.engines.launched_engine_sets() - launched):
                    await cluster.engines.drop_engine_set(set_id)
                known = dict(spec.hosts)
                left = tuple((h, have.get(h, 0)) for h in target if h in known or have.get(h))
                cluster.update(
                    spec=dataclasses.replace(
                        cluster.spec, n=len(kept), hosts=left or spec.hosts, scaled=True
                    )
                )
                cluster.engines.configure_engine_launcher()
                raise self._grow_failed(n, added, growth(target, have), kept, e) from e
            new = sorted(set(client.ids) - before)
        cluster.engines.configure_engine_launcher()
        return kept + new, set(kept)

    def _grow_failed(
        self, n: int, added: int, grow: dict[str, int], kept: list[int], e: Exception
    ) -> GrowError:
        return GrowError(
            f"scale {n}: starting {added} engine{'s' if added > 1 else ''} "
            f"{self.grow_where(grow)} failed ({str(e)[:300]}); the cluster goes on with the "
            f"{len(kept)} ranks it kept, in a new group: check that the hosts can be reached "
            "(or that the queue has room), then scale again",
            kept,
        )

    def _layout_of(
        self, cluster: Scalable, origins: dict[int, dict[str, Any]], ids: list[int]
    ) -> dict[str, int]:
        hosts = [self.host_of(cluster, origins[eid]) for eid in ids]
        return {h: c for h, c in host_layout(hosts, []).items() if c}

    def host_of(self, cluster: Scalable, origin: dict[str, Any]) -> str:
        """The host (as ``--hosts`` names it) an engine runs on, from its origin."""
        engine_set = dict(cluster.engines.engine_sets()).get(origin["set"])
        host = origin["host"] or self.host_by_launch(engine_set, origin)
        if not host:
            raise ScaleError(
                "cannot tell which host an engine runs on; stop and start the cluster again"
            )
        return str(host)

    def host_by_launch(self, engine_set: Any, origin: dict[str, Any]) -> str | None:
        """The host of an engine that does not name its own, from how its engine set
        was launched; None: unknown."""
        return None

    async def _remove(
        self, cluster: Scalable, leaving: list[RankInfo], origins: dict[int, dict[str, Any]]
    ) -> None:
        """Stop the engines of *leaving*; then stop engine sets (a Slurm job, an mpiexec)
        left with no engine."""
        ranks = ", ".join(str(r.rank) for r in sorted(leaving, key=lambda r: r.rank))
        cluster.progress(f"stopping rank{'s' if len(leaving) > 1 else ''} {ranks}")
        client = cluster.require_client()
        sets = dict(cluster.engines.engine_sets())
        shutdown = []
        stops = []
        for r in leaving:
            origin = origins[r.engine_id]
            launcher = self.engine_stopper(sets.get(origin["set"]), origin["host"], r.pid)
            if launcher is not None:
                stops.append(asyncio.get_running_loop().run_in_executor(None, launcher.signal, 15))
            else:
                shutdown.append(r.engine_id)
        if shutdown:
            # MPI and Slurm start an engine set as one process (mpiexec, the job): a single
            # engine leaves through ipyparallel's own shutdown request.
            client.shutdown(targets=shutdown, block=False)
        await asyncio.gather(*stops)
        ids = {r.engine_id for r in leaving}
        deadline = time.monotonic() + LEAVE_TIMEOUT
        while ids & set(client.ids) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if ids & set(client.ids):
            cluster.progress(
                f"engines {sorted(ids & set(client.ids))} still registered after "
                f"{LEAVE_TIMEOUT:.0f} s; going on without them"
            )
        staying = {origins[r.engine_id]["set"] for r in cluster.ranks if r.engine_id not in ids}
        empty = [s for s in sets if s not in staying]
        if empty:
            cluster.progress(f"stopping engine set{'s' if len(empty) > 1 else ''} left empty")
            await cluster.engines.stop_engine_sets(empty)

    async def _add(
        self, cluster: Scalable, added: int, target: dict[str, int], have: dict[str, int]
    ) -> None:
        spec = cluster.spec
        grow = growth(target, have)
        starts = self.scale_starts(spec, added, target, have, cluster.engine_env(0))
        where = f" {self.grow_where(grow)}" if grow else ""
        cluster.progress(f"starting {added} engine{'s' if added > 1 else ''}{where}")
        for count, env, traits in starts:
            await cluster.engines.start_engines(count, env, traits=traits)


async def origins_of(cluster: Scalable) -> dict[int, dict[str, Any]]:
    """{engine id: where it came from} for every rank (``rankenv.origin``); the engines
    of the first engine set (start, restart) carry no set name: they get its id."""
    from ...engine import rankenv

    ids = [r.engine_id for r in cluster.ranks]
    client = cluster.require_client()
    found = await asyncio.wrap_future(client[ids].apply_async(rankenv.origin))
    sets = cluster.engines.engine_sets()
    base = sets[0][0] if sets else None
    out = {}
    for eid, origin in zip(ids, found, strict=True):
        origin = dict(origin)
        origin["set"] = origin["set"] or base
        out[eid] = origin
    return out


class HostListEngines(RemoteEngines):
    """The ranks laid out by the user on named hosts (``--hosts h1:2,h2:2``): ssh, mpi.

    A scale without ``--hosts`` grows the least-loaded host and shrinks the most loaded
    one (``placement.host_counts``); with it, the hosts get the counts given. On each
    host its highest local ranks leave first."""

    takes_hosts: ClassVar[bool] = True

    def check_own(self, spec: ClusterSpec) -> None:
        if not spec.hosts:
            raise HostsError(
                f"--launcher {self.name} needs --hosts, e.g. --hosts node1:2,node2:2 "
                "(hosts you can ssh to without a password)"
            )
        total = sum(n for _, n in spec.hosts)
        if spec.n != total:
            raise HostsError(
                f"-n {spec.n} but --hosts {format_hosts(spec.hosts)} has {total} ranks; "
                "drop -n (it follows --hosts) or change the counts"
            )
        if spec.gpus_per_node:
            over = [f"{h}:{n}" for h, n in spec.hosts if n > spec.gpus_per_node]
            if over:
                raise HostsError(
                    f"--hosts {over[0]} asks for more ranks than --gpus-per-node "
                    f"{spec.gpus_per_node}: one GPU per rank"
                )

    def current_layout(
        self, cluster: Scalable, origins: dict[int, dict[str, Any]]
    ) -> dict[str, int]:
        hosts = [self.host_of(cluster, origin) for origin in origins.values()]
        return host_layout(hosts, [host for host, _ in cluster.spec.hosts])

    def target_layout(
        self, cluster: Scalable, origins: dict[int, dict[str, Any]], n: int, hosts: str | None
    ) -> dict[str, int]:
        current = self.current_layout(cluster, origins)
        cap = cluster.spec.gpus_per_node
        if hosts:
            try:
                asked = dict(parse_hosts(hosts))
            except HostsError as e:
                raise ScaleError(str(e).replace("--hosts", "scale --hosts")) from None
            if n and n != sum(asked.values()):
                raise ScaleError(
                    f"scale {n} --hosts {hosts}: the hosts have {sum(asked.values())} ranks; "
                    "drop N (it follows --hosts) or change the counts"
                )
            target = asked_layout(current, asked)
        else:
            try:
                target = host_counts(current, n, cap)
            except PlacementError as e:
                raise ScaleError(str(e)) from None
        over = [f"{h}:{c}" for h, c in target.items() if cap and c > cap]
        if over:
            raise ScaleError(
                f"scale: {over[0]} is more ranks than --gpus-per-node {cap} (one GPU per rank)"
            )
        return target

    def leaving(self, cluster: Scalable, plan: ScalePlan) -> list[RankInfo]:
        host_of = {r.rank: self.host_of(cluster, plan.origins[r.engine_id]) for r in cluster.ranks}
        going = leaving_by_host(host_of, plan.target)
        by_rank = {r.rank: r for r in cluster.ranks}
        return [by_rank[rank] for rank in going]
