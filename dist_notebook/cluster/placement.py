"""Ranks across hosts: order the engines' probes by (node, local rank), number them.

Engines of remote launchers register in whatever order the network delivers them, so
their ipyparallel ids say nothing about where they run. Each engine reports a probe
(``engine.rankenv.probe``); here ranks are numbered node by node, as torchrun does:
node order is the scheduler's node id where there is one (Slurm, our SSH launcher), else
the lowest launcher rank on the node (MPI), else first registration; within a node,
local rank order. MASTER_ADDR is rank 0's own address towards the controller.

The decisions are pure functions of plain data (no cluster, no client): ``place`` for
remote ranks, ``local_ranks`` for engines of this machine, ``threads_per_rank``, and for
a scale the hosts' rank counts (``host_counts``, ``host_layout``, ``asked_layout``,
``growth``) and which ranks leave (``leaving_by_host``, ``newest_ranks``); ``mpi_hosts``
reads an mpiexec's host slots. Only ``assign_ranks`` and ``ranks_across_hosts`` talk to
engines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .hosts import format_hosts, parse_hosts


class PlacementError(RuntimeError):
    """The engines' reports cannot be turned into ranks; the message says why."""


@dataclass(frozen=True)
class Place:
    engine_id: int
    rank: int
    local_rank: int
    node_rank: int
    world_size: int
    local_world_size: int
    host: str
    address: str
    interface: str
    pid: int
    master_addr: str = ""

    def to_assign(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "node_rank": self.node_rank,
            "world_size": self.world_size,
            "local_world_size": self.local_world_size,
            "master_addr": self.master_addr,
            "interface": self.interface,
        }


def _node_key(probe: dict[str, Any]) -> tuple[str, str]:
    return (probe["host"], probe["address"])


def place(
    ids: list[int],
    probes: list[dict[str, Any]],
    previous: list[str] | None = None,
    kept: set[int] | None = None,
) -> list[Place]:
    """One Place per engine, in rank order.

    After a scale, *previous* is the hosts' node order before it and *kept* the engines
    that were there: known hosts keep their order (new ones follow), and on each host the
    kept engines keep theirs, the new ones after them. (Node ids of jobs or launches
    started apart say nothing about each other.)
    """
    rescaled = previous is not None
    known = {host: i for i, host in enumerate(dict.fromkeys(previous or []))}
    kept = kept or set()
    nodes: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = {}
    for position, (eid, probe) in enumerate(zip(ids, probes, strict=True)):
        nodes.setdefault(_node_key(probe), []).append((position, {**probe, "engine_id": eid}))

    def node_order(key: tuple[str, str]) -> tuple[int, int, int, int]:
        members = nodes[key]
        node_ids = {p["node"] for _, p in members if p["node"] is not None}
        if len(node_ids) > 1 and not rescaled:
            raise PlacementError(f"host {key[0]} reports node ids {sorted(node_ids)}")
        hints = [p["rank_hint"] for _, p in members if p["rank_hint"] is not None]
        first = min(pos for pos, _ in members)
        before = known.get(key[0], len(known))
        return (before, min(node_ids, default=1 << 30), min(hints, default=1 << 30), first)

    ordered = sorted(nodes, key=node_order)
    world = len(ids)
    places: list[Place] = []
    for node_rank, key in enumerate(ordered):
        members = sorted(
            nodes[key],
            key=lambda m: (
                m[1]["engine_id"] not in kept if rescaled else False,
                m[1]["local_rank"] if m[1]["local_rank"] is not None else 1 << 30,
                m[0],
            ),
        )
        for local_rank, (_, p) in enumerate(members):
            places.append(
                Place(
                    engine_id=p["engine_id"],
                    rank=len(places),
                    local_rank=local_rank,
                    node_rank=node_rank,
                    world_size=world,
                    local_world_size=len(members),
                    host=p["host"],
                    address=p["address"],
                    interface=p["interface"],
                    pid=p["pid"],
                )
            )
    master = places[0].address
    return [Place(**{**p.__dict__, "master_addr": master}) for p in places]


def host_counts(current: dict[str, int], n: int, cap: int = 0) -> dict[str, int]:
    """The hosts' rank counts for *n* ranks: growing fills the least-loaded host (ties:
    the first), shrinking empties the most loaded one (ties: the last). *cap* (GPUs per
    node) bounds a host's ranks (PlacementError where the hosts cannot hold *n*)."""
    out = dict(current)
    order = {host: i for i, host in enumerate(out)}
    while sum(out.values()) < n:
        free = [h for h in out if not cap or out[h] < cap]
        if not free:
            raise PlacementError(
                f"scale {n}: the hosts {format_hosts(tuple(current.items()))} have "
                f"{cap} GPUs each, one per rank; add a host with scale --hosts"
            )
        out[min(free, key=lambda h: (out[h], order[h]))] += 1
    while sum(out.values()) > n:
        out[max(out, key=lambda h: (out[h], order[h]))] -= 1
    return out


def host_layout(hosts: list[str], known: list[str]) -> dict[str, int]:
    """{host: ranks} of ranks running on *hosts*, in the order of *known* (the
    cluster's hosts, which keep a 0 when they have no rank), other hosts after them."""
    counts = dict.fromkeys(known, 0)
    for host in hosts:
        counts[host] = counts.get(host, 0) + 1
    return counts


def asked_layout(current: dict[str, int], asked: dict[str, int]) -> dict[str, int]:
    """The layout ``scale --hosts`` asks for: a host left out ends with no rank, a new
    host comes after the others."""
    target = {host: asked.get(host, 0) for host in current}
    target.update({h: c for h, c in asked.items() if h not in target})
    return target


def growth(target: dict[str, int], have: dict[str, int]) -> dict[str, int]:
    """{host: ranks to add} of the hosts that *target* gives more than they *have*."""
    return {h: c - have.get(h, 0) for h, c in target.items() if c > have.get(h, 0)}


def leaving_by_host(host_of: dict[int, str], target: dict[str, int]) -> list[int]:
    """The ranks that leave for *target* (*host_of*: each rank's host): on each host
    beyond its count, its highest ranks."""
    by_host: dict[str, list[int]] = {}
    for rank in sorted(host_of):
        by_host.setdefault(host_of[rank], []).append(rank)
    out: list[int] = []
    for host, ranks in by_host.items():
        extra = len(ranks) - target.get(host, 0)
        if extra > 0:
            out += ranks[-extra:]
    return out


def newest_ranks(set_of: dict[int, str | None], set_order: list[str], count: int) -> list[int]:
    """The *count* newest ranks (*set_of*: each rank's engine set, *set_order*: the sets
    in start order): the last set's highest ranks first."""
    order = {s: i for i, s in enumerate(set_order)}
    newest = sorted(set_of, key=lambda r: (order.get(set_of[r] or "", -1), r), reverse=True)
    return newest[: max(0, count)]


def mpi_hosts(mpi_args: list[str]) -> list[str]:
    """The host of each launcher rank of an mpiexec started with ``--host h1:2,h2:1``
    (``--map-by slot``: a host's slots are consecutive ranks); [] without ``--host``."""
    hosts = mpi_args[mpi_args.index("--host") + 1] if "--host" in mpi_args else ""
    out: list[str] = []
    for host, count in parse_hosts(hosts) if hosts else ():
        out += [host] * count
    return out


def local_ranks(infos: list[dict[str, Any]], n: int) -> list[tuple[int, int]]:
    """(position, rank) of engines of this machine, in rank order, from each engine's
    report (``group.rank_info``, in registration order): a plain ipengine without the
    launcher's variables (rank -1) gets its position. PlacementError unless the ranks
    are 0..n-1."""
    ranks = sorted(
        (
            (position, info["rank"] if info["rank"] >= 0 else position)
            for position, info in enumerate(infos)
        ),
        key=lambda pr: pr[1],
    )
    if [rank for _, rank in ranks] != list(range(n)):
        raise PlacementError(f"engines report ranks {[rank for _, rank in ranks]}, not 0..{n - 1}")
    return ranks


def threads_per_rank(cores: int | None, ranks_on_host: int, given: int | None = None) -> int:
    """Each rank's thread count: *given* (``--threads``), else the host's *cores* over
    its ranks, at least 1 (engines otherwise each take every core and oversubscribe)."""
    if given is not None:
        return given
    return max(1, (cores or 1) // max(1, ranks_on_host))


async def assign_ranks(
    client: Any, ids: list[int], previous: list[str] | None = None, kept: set[int] | None = None
) -> tuple[list[Place], list[dict]]:
    """Probe engines *ids*, number them, and give each its place (before the group).

    Returns the places and each engine's identity afterwards (``group.rank_info``)."""
    import asyncio

    from ..engine import rankenv

    probes = await asyncio.wrap_future(client[ids].apply_async(rankenv.probe))
    places = place(ids, probes, previous, kept)
    futures = [client[p.engine_id].apply_async(rankenv.assign, p.to_assign()) for p in places]
    infos = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
    return places, list(infos)


async def ranks_across_hosts(
    client: Any,
    ids: list[int],
    info: Any,
    previous: list[str] | None = None,
    kept: set[int] | None = None,
) -> tuple[list[Any], str]:
    """The cluster's rank table for remote engines, and MASTER_ADDR (rank 0's address)."""
    places, infos = await assign_ranks(client, ids, previous, kept)
    ranks = [
        info(p.rank, p.engine_id, p.host, p.pid, i["device"], node_rank=p.node_rank)
        for p, i in zip(places, infos, strict=True)
    ]
    return ranks, places[0].master_addr
