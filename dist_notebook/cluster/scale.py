"""``%dist_cluster scale N`` between cells: add or remove ranks, renumber, regroup.

Engines are added and removed through the cluster's launcher (ipyparallel's launchers
and ours in ``launchers``), never by a scheduler of our own:

- local: N - n more engines start with ranks n..N-1; shrinking stops the engines of
  ranks N..n-1.
- ssh: growing fills the least-loaded host of those the cluster was started with (ties:
  the first in ``--hosts`` order), one rank at a time; shrinking takes from the most
  loaded one (ties: the last), its highest local rank first. ``scale --hosts h1:2,h2:3``
  gives the new layout instead (a host left out ends with no rank; a new host is added
  after the others). The new engines are one more engine set over ssh, told their node
  and their local ranks after the host's present ones; a leaving engine is stopped by
  its own launcher.
- mpi: the same rule; each host that grows gets one more ``mpiexec`` (local ranks and
  GPUs after the host's present ones); a leaving engine is shut down through the
  controller, and an ``mpiexec`` left with no engine is stopped.
- slurm: growing submits one more job for the extra ranks, with the cluster's options
  (partition, time limit, account, GPUs per node; at most ``--nodes`` nodes); shrinking
  removes the newest ranks first (those of the last job), and a job left with no engine
  is cancelled.

Every engine is then given its place again (RANK, NODE_RANK, LOCAL_RANK,
LOCAL_WORLD_SIZE, WORLD_SIZE, MASTER_ADDR: see ``placement``; ranks by node, then local
rank, hosts keeping their order) and the thread count of the new layout (OMP_NUM_THREADS,
MKL_NUM_THREADS, ``torch.set_num_threads``: the cores over the ranks on the host, or
``--threads``), and the default process group is re-created on a fresh store port (rank 0
binds port 0), so no old connection survives.

What the user's state does: surviving ranks keep their Python namespace, new ranks start
empty. A DDP model holds the old group, so it must be built again after scaling: run
the cell that defines the model (``model = DDP(Net())``), whose constructor broadcasts
rank 0's parameters to every rank; new ranks need the cells that define the classes
first. The global batch stays the same when the per-rank batch is derived from it
(``batch = global_batch // world_size``): ``world_size`` is updated on every rank.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

from traitlets.config import Config

from .. import envvars, privates
from ..engine.rankenv import set_threads
from ..protocol import ClusterState
from . import limits
from .hosts import HostsError, format_hosts, parse_hosts
from .launchers import engine_args
from .loop import run_sync
from .placement import ranks_across_hosts

if TYPE_CHECKING:
    from .cluster import DistCluster

log = logging.getLogger("dist_notebook")
LEAVE_TIMEOUT = 30.0  # seconds for removed engines to leave the controller


class ScaleError(RuntimeError):
    """The cluster cannot be scaled as asked; the message names the fix."""


class GrowError(ScaleError):
    """New engines did not start; the cluster goes on with the engines it kept."""

    def __init__(self, message: str, kept: list[int]) -> None:
        super().__init__(message)
        self.kept = kept


def _client(cluster: DistCluster) -> Any:
    """The client of *cluster*, which scale asks of a ready cluster only (check())."""
    assert cluster.client is not None, "scale needs a started cluster"
    return cluster.client


def _ipp(cluster: DistCluster) -> Any:
    """ipyparallel's cluster under *cluster* (there once it started)."""
    assert cluster._ipp is not None, "scale needs a started cluster"
    return cluster._ipp


def check(cluster: DistCluster, n: int, hosts: str | None = None) -> None:
    from .cluster import ClusterError
    from .spec import ClusterConfigError

    spec = cluster.spec
    try:
        cluster.owner.refuse_during_run(f"cannot scale to {n} ranks")
        if n > cluster.n and spec.engines.on_this_machine:
            # (remote specs are not re-validated: their hosts' layout follows the scale)
            limits.check_capacity(dataclasses.replace(spec, n=n), asked="scale")
    except (ClusterError, ClusterConfigError) as e:
        raise ScaleError(str(e)) from None
    if cluster.state.value != "ready":
        raise ScaleError(
            f"the cluster is {cluster.state.value}: scale a ready cluster "
            "(run %dist_cluster restart first)"
        )
    refusal = spec.engines.scale_refusal(spec, cluster.n, n, hosts)
    if refusal is not None:
        raise ScaleError(refusal)
    if spec.gpus and n > len(spec.gpus):
        raise ScaleError(
            f"scale {n}: the cluster has GPUs {','.join(map(str, cluster.spec.gpus))}, one per "
            "rank; stop and start with --gpus listing more"
        )


async def scale(cluster: DistCluster, n: int, hosts: str | None = None) -> float:
    """Make *cluster* have *n* ranks (ssh, mpi: laid out as *hosts* says, if given);
    return the seconds it took."""
    check(cluster, n, hosts)
    t0 = time.perf_counter()
    old = cluster.n
    remote = not cluster.spec.engines.on_this_machine
    origins: dict[int, dict[str, Any]] = {}
    target: dict[str, int] = {}
    if remote:
        origins = await _origins(cluster)
        if cluster.spec.engines.takes_hosts:
            target = _target_layout(cluster, origins, n, hosts)
            n = sum(target.values())
            if target == _current_layout(cluster, origins):
                return 0.0
    if n == old and not target:
        return 0.0
    cluster.move(ClusterState.RESTARTING)
    failed: GrowError | None = None
    try:
        previous: list[str] | None = None
        kept: set[int] | None = None
        if remote:
            previous = list(dict.fromkeys(r.host for r in cluster.ranks))
            try:
                ids, kept = await _scale_remote(cluster, n, origins, target)
            except GrowError as e:
                if not e.kept:
                    raise
                failed, ids, kept = e, e.kept, set(e.kept)
        elif n > old:
            ids = await _grow(cluster, n)
        else:
            ids = await _shrink(cluster, n)
        cluster.ranks, cluster.master_addr = await ranks_across_hosts(
            _client(cluster), ids, type(cluster.ranks[0]), previous, kept
        )
        await _match_threads(cluster, ids)
        cluster.progress(f"re-creating the process group on {len(ids)} ranks")
        await cluster.init_group()
    except BaseException:
        cluster.move(ClusterState.FAILED)
        raise
    cluster._ready(t0)
    if failed is not None:
        raise failed  # the cluster is ready again, with the ranks it kept
    return time.perf_counter() - t0


def scale_sync(cluster: DistCluster, n: int, hosts: str | None = None) -> float:
    return run_sync(scale(cluster, n, hosts))


async def _match_threads(cluster: DistCluster, ids: list[int]) -> None:
    """Every rank's thread count for the new layout: survivors were started for the
    old one (a local cluster's cores over its old rank count; a remote host's cores over
    its old ranks there), and ranks of a Slurm job that shares a node with another job
    counted only their own job's ranks."""
    spec = cluster.spec
    threads = spec.engines.threads(spec)
    await asyncio.wrap_future(_client(cluster)[ids].apply_async(set_threads, threads))


def _resize(cluster: DistCluster, n: int) -> None:
    spec = cluster.spec
    gpus = spec.gpus[:n] if spec.gpus else ()
    cluster.spec = dataclasses.replace(spec, n=n, gpus=gpus)


async def _grow(cluster: DistCluster, n: int) -> list[int]:
    client = _client(cluster)
    before = set(client.ids)
    kept = [r.engine_id for r in cluster.ranks]
    added = n - cluster.n
    _resize(cluster, n)
    await cluster._start_engines(added, n - added)
    await cluster._wait_for_engines(before, added)
    return kept + sorted(set(client.ids) - before)


async def _shrink(cluster: DistCluster, n: int) -> list[int]:
    leaving = [r for r in cluster.ranks if r.rank >= n]
    cluster.progress(f"stopping rank{'s' if len(leaving) > 1 else ''} {leaving[0].rank}..")
    pids = {r.pid for r in leaving}
    for set_id in list(cluster._engine_sets):
        engine_set = _ipp(cluster).engines.get(set_id)
        for identifier, launcher in list(getattr(engine_set, "launchers", {}).items()):
            if getattr(launcher, "pid", None) in pids:
                # Buried first: a stopped engine is not a dead rank.
                cluster._buried.add((set_id, identifier))
                await launcher.stop()
    _resize(cluster, n)
    cluster.ranks = [r for r in cluster.ranks if r.rank < n]
    return [r.engine_id for r in cluster.ranks]


# --- remote launchers ---------------------------------------------------------------


async def _origins(cluster: DistCluster) -> dict[int, dict[str, Any]]:
    """{engine id: where it came from} for every rank (``rankenv.origin``)."""
    from ..engine import rankenv

    ids = [r.engine_id for r in cluster.ranks]
    found = await asyncio.wrap_future(_client(cluster)[ids].apply_async(rankenv.origin))
    base = _base_set(cluster)
    out = {}
    for eid, origin in zip(ids, found, strict=True):
        origin = dict(origin)
        origin["set"] = origin["set"] or base
        out[eid] = origin
    return out


def _base_set(cluster: DistCluster) -> str | None:
    """The engine set of start (or restart): its engines carry no set name."""
    return cluster._engine_sets[0] if cluster._engine_sets else None


def _mpi_layout(engine_set: Any) -> list[str]:
    """Host of each rank of an mpiexec started with ``--host h1:2,h2:1 --map-by slot``."""
    args = list(getattr(engine_set, "mpi_args", []))
    hosts = args[args.index("--host") + 1] if "--host" in args else ""
    out: list[str] = []
    for host, count in parse_hosts(hosts) if hosts else ():
        out += [host] * count
    return out


def _host_of(cluster: DistCluster, origin: dict[str, Any]) -> str:
    """The host (as ``--hosts`` names it) an engine runs on."""
    if origin["host"]:
        return str(origin["host"])
    engine_set = _ipp(cluster).engines.get(origin["set"])
    layout = _mpi_layout(engine_set) if engine_set is not None else []
    rank = origin["mpi_rank"]
    if rank is None or rank >= len(layout):
        raise ScaleError(
            "cannot tell which host an engine runs on; stop and start the cluster again"
        )
    return layout[rank]


def _current_layout(cluster: DistCluster, origins: dict[int, dict[str, Any]]) -> dict[str, int]:
    """{host: ranks} in the cluster's host order (hosts scale emptied keep a 0)."""
    counts = {host: 0 for host, _ in cluster.spec.hosts}
    for origin in origins.values():
        host = _host_of(cluster, origin)
        counts[host] = counts.get(host, 0) + 1
    return counts


def _target_layout(
    cluster: DistCluster, origins: dict[int, dict[str, Any]], n: int, hosts: str | None
) -> dict[str, int]:
    current = _current_layout(cluster, origins)
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
        target = {host: asked.get(host, 0) for host in current}
        target.update({h: c for h, c in asked.items() if h not in target})
    else:
        target = layout(current, n, cap)
    over = [f"{h}:{c}" for h, c in target.items() if cap and c > cap]
    if over:
        raise ScaleError(
            f"scale: {over[0]} is more ranks than --gpus-per-node {cap} (one GPU per rank)"
        )
    return target


def layout(current: dict[str, int], n: int, cap: int = 0) -> dict[str, int]:
    """The hosts' rank counts for *n* ranks: growing fills the least-loaded host (ties:
    the first), shrinking empties the most loaded one (ties: the last). *cap* (GPUs per
    node) bounds a host's ranks."""
    out = dict(current)
    order = {host: i for i, host in enumerate(out)}
    while sum(out.values()) < n:
        free = [h for h in out if not cap or out[h] < cap]
        if not free:
            raise ScaleError(
                f"scale {n}: the hosts {format_hosts(tuple(current.items()))} have "
                f"{cap} GPUs each, one per rank; add a host with scale --hosts"
            )
        out[min(free, key=lambda h: (out[h], order[h]))] += 1
    while sum(out.values()) > n:
        out[max(out, key=lambda h: (out[h], order[h]))] -= 1
    return out


def _leaving(
    cluster: DistCluster, origins: dict[int, dict[str, Any]], n: int, target: dict[str, int]
) -> list[Any]:
    """The ranks that go: per host its highest local ranks (ssh, mpi), else the newest
    (Slurm: the last job's ranks first)."""
    if target:
        by_host: dict[str, list[Any]] = {}
        for r in cluster.ranks:
            by_host.setdefault(_host_of(cluster, origins[r.engine_id]), []).append(r)
        out: list[Any] = []
        for host, ranks in by_host.items():
            extra = len(ranks) - target.get(host, 0)
            if extra > 0:
                out += sorted(ranks, key=lambda r: r.rank)[-extra:]
        return out
    sets = {s: i for i, s in enumerate(cluster._engine_sets)}
    newest = sorted(
        cluster.ranks,
        key=lambda r: (sets.get(origins[r.engine_id]["set"], -1), r.rank),
        reverse=True,
    )
    return newest[: max(0, cluster.n - n)]


async def _scale_remote(
    cluster: DistCluster, n: int, origins: dict[int, dict[str, Any]], target: dict[str, int]
) -> tuple[list[int], set[int]]:
    """Remove, then add engines through the launcher; return (engine ids, kept ids)."""
    leaving = _leaving(cluster, origins, n, target)
    if leaving:
        await _remove(cluster, leaving, origins)
    gone = {r.engine_id for r in leaving}
    kept = [r.engine_id for r in cluster.ranks if r.engine_id not in gone]
    spec = cluster.spec
    have: dict[str, int] = {}
    for eid in kept:
        if target:
            host = _host_of(cluster, origins[eid])
            have[host] = have.get(host, 0) + 1
    if target:
        cluster.spec = dataclasses.replace(spec, n=n, hosts=tuple(target.items()), scaled=True)
    else:
        cluster.spec = dataclasses.replace(spec, n=n, scaled=True)
    cluster.ranks = [r for r in cluster.ranks if r.engine_id not in gone]
    added = n - len(kept)
    new: list[int] = []
    if added > 0:
        before = set(_client(cluster).ids)
        sets = set(_ipp(cluster).engines)
        try:
            await _add(cluster, added, target, have)
            await cluster._wait_for_engines(before, added)
        except Exception as e:
            # Nothing half-grown stays behind (a Slurm job still pending, engines that
            # did start): the cluster goes on with the ranks it kept.
            for set_id in [s for s in list(_ipp(cluster).engines) if s not in sets]:
                await _drop_set(cluster, set_id)
            known = dict(spec.hosts)
            kept_layout = tuple((h, have.get(h, 0)) for h in target if h in known or have.get(h))
            cluster.spec = dataclasses.replace(
                cluster.spec, n=len(kept), hosts=kept_layout or spec.hosts, scaled=True
            )
            _remember_layout(cluster)
            grow = {h: c - have.get(h, 0) for h, c in target.items() if c > have.get(h, 0)}
            where = f"on {format_hosts(tuple(grow.items()))}" if grow else "in a new Slurm job"
            raise GrowError(
                f"scale {n}: starting {added} engine{'s' if added > 1 else ''} {where} failed "
                f"({str(e)[:300]}); the cluster goes on with the {len(kept)} ranks it kept, "
                "in a new group: check that the hosts can be reached (or that the queue has "
                "room), then scale again",
                kept,
            ) from e
        new = sorted(set(_client(cluster).ids) - before)
    _remember_layout(cluster)
    return kept + new, set(kept)


async def _remove(
    cluster: DistCluster, leaving: list[Any], origins: dict[int, dict[str, Any]]
) -> None:
    """Stop the engines of *leaving*; then stop engine sets (a Slurm job, an mpiexec)
    left with no engine."""
    ranks = ", ".join(str(r.rank) for r in sorted(leaving, key=lambda r: r.rank))
    cluster.progress(f"stopping rank{'s' if len(leaving) > 1 else ''} {ranks}")
    client = _client(cluster)
    shutdown = []
    stops = []
    for r in leaving:
        launcher = _stopper(cluster, origins[r.engine_id], r.pid)
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
    empty = [s for s in cluster._engine_sets if s not in staying and s in _ipp(cluster).engines]
    if empty:
        # Together: each stop waits for its launcher (an mpiexec's exit, scancel).
        cluster.progress(f"stopping engine set{'s' if len(empty) > 1 else ''} left empty")
        await asyncio.gather(*(_ipp(cluster).stop_engines(s) for s in empty))
        for set_id in empty:
            cluster._engine_sets.remove(set_id)


async def _drop_set(cluster: DistCluster, set_id: str) -> None:
    """Stop an engine set that scale started and that failed; forget it either way (a
    launcher whose host cannot be reached cannot be stopped, and nothing runs there)."""
    try:
        await _ipp(cluster).stop_engines(set_id)
    except Exception as e:  # the host is unreachable: its engine never started
        log.info("engine set %s of a failed scale: %s", set_id, e)
    _ipp(cluster).engines.pop(set_id, None)
    if set_id in cluster._engine_sets:
        cluster._engine_sets.remove(set_id)


def _stopper(cluster: DistCluster, origin: dict[str, Any], pid: int) -> Any:
    """The launcher that stops the engine with *pid* on *origin*'s host alone (ssh), or
    None (it leaves through ipyparallel's shutdown request)."""
    engine_set = _ipp(cluster).engines.get(origin["set"])
    return cluster.spec.engines.engine_stopper(engine_set, origin["host"], pid)


async def _add(
    cluster: DistCluster, added: int, target: dict[str, int], have: dict[str, int]
) -> None:
    spec = cluster.spec
    ipp = _ipp(cluster)
    grow = {h: target[h] - have.get(h, 0) for h in target if target[h] > have.get(h, 0)}
    starts = spec.engines.scale_starts(spec, added, target, have, cluster._engine_env(0))
    where = f" on {format_hosts(tuple(grow.items()))}" if grow else ""
    cluster.progress(f"starting {added} engine{'s' if added > 1 else ''}{where}")
    for count, env, traits in starts:
        set_id = privates.new_engine_set_id(ipp)
        env[envvars.ENGINE_SET] = set_id
        cluster._engine_set = await ipp.start_engines(
            count,
            engine_set_id=set_id,
            environment=env,
            engine_args=engine_args(cluster.spec),
            **traits,
        )
        cluster._engine_sets.append(cluster._engine_set)
    cluster._owner_only_files()


def _remember_layout(cluster: DistCluster) -> None:
    """A later ``restart`` starts the cluster as it is now, in one engine set."""
    _, config = cluster.spec.engines.engine_launcher(cluster.spec)
    for name, traits in config.items():
        section = _ipp(cluster).config[name]
        if not isinstance(section, Config):
            section = _ipp(cluster).config[name] = Config()
        section.update(traits)
