"""Ranks across hosts: order the engines' probes by (node, local rank), number them.

Engines of remote launchers register in whatever order the network delivers them, so
their ipyparallel ids say nothing about where they run. Each engine reports a probe
(``engine.rankenv.probe``); here ranks are numbered node by node, as torchrun does:
node order is the scheduler's node id where there is one (Slurm, our SSH launcher), else
the lowest launcher rank on the node (MPI), else first registration; within a node,
local rank order. MASTER_ADDR is rank 0's own address towards the controller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
