"""The ranks' placement group: one bundle per rank, its strategy, where the bundles went.

Pure functions of plain data (what ``ray.nodes()`` and ``placement_group_table`` say),
so they are tested without Ray: the bundles asked for (``bundles``), whether the Ray
cluster could ever hold them as it is (``shortfall``, for the start that says so within
seconds instead of waiting out its timeout), and each bundle's node and local rank once
placed (``bundle_places``), which orders the ranks by (node, local rank).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# --pack: every rank on one node; --spread: over as many nodes as Ray can; neither:
# Ray's PACK (as few nodes as fit, best effort).
STRATEGIES = {"": "PACK", "pack": "STRICT_PACK", "spread": "SPREAD"}


@dataclass(frozen=True)
class BundlePlace:
    """Where a rank's bundle went: its node (index in node order, Ray's id, address)
    and its local rank among the bundles of that node."""

    bundle: int
    node: int
    node_id: str
    address: str
    local_rank: int
    local_size: int


def bundles(n: int, cpus: float, gpus: int) -> list[dict[str, float]]:
    """One bundle per rank: its CPUs and GPUs."""
    one: dict[str, float] = {"CPU": float(cpus)}
    if gpus:
        one["GPU"] = float(gpus)
    return [dict(one) for _ in range(n)]


def _need(wanted: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for bundle in wanted:
        for name, amount in bundle.items():
            out[name] = out.get(name, 0.0) + amount
    return out


def _fits(need: dict[str, float], have: dict[str, float]) -> bool:
    return all(have.get(name, 0.0) >= amount for name, amount in need.items())


def _say(need: dict[str, float]) -> str:
    return ", ".join(f"{amount:g} {name}" for name, amount in sorted(need.items()))


def shortfall(wanted: list[dict[str, float]], strategy: str, nodes: list[dict[str, Any]]) -> str:
    """Why the live nodes (``ray.nodes()``), even idle, cannot hold *wanted* with
    *strategy*; "" when they could (then it is a matter of waiting for free ones)."""
    alive = [node.get("Resources", {}) for node in nodes if node.get("Alive")]
    if not wanted:
        return ""
    one = wanted[0]
    if not any(_fits(one, have) for have in alive):
        return f"no Ray node has the {_say(one)} of one rank"
    need = _need(wanted)
    if strategy == "STRICT_PACK":
        if not any(_fits(need, have) for have in alive):
            return f"no Ray node has the {_say(need)} of all {len(wanted)} ranks (--pack)"
        return ""
    # PACK and SPREAD are best effort: bundles may share nodes; each goes where one fits.
    left = [dict(have) for have in alive]
    for bundle in wanted:
        spot = next((have for have in left if _fits(bundle, have)), None)
        if spot is None:
            return f"the Ray cluster's nodes do not have the {_say(need)} of {len(wanted)} ranks"
        for name, amount in bundle.items():
            spot[name] -= amount
    return ""


def bundle_places(bundle_nodes: dict[int, str], nodes: list[dict[str, Any]]) -> list[BundlePlace]:
    """Each bundle's place, in bundle order: nodes numbered by the lowest bundle they
    hold, bundles on a node numbered in bundle order (*bundle_nodes*: bundle index ->
    node id, ``placement_group_table(pg)["bundles_to_node_id"]``)."""
    address = {n["NodeID"]: n.get("NodeManagerAddress", "") for n in nodes}
    order: list[str] = []
    for index in sorted(bundle_nodes):
        if bundle_nodes[index] not in order:
            order.append(bundle_nodes[index])
    members: dict[str, list[int]] = {node: [] for node in order}
    for index in sorted(bundle_nodes):
        members[bundle_nodes[index]].append(index)
    out = []
    for index in sorted(bundle_nodes):
        node = bundle_nodes[index]
        out.append(
            BundlePlace(
                bundle=index,
                node=order.index(node),
                node_id=node,
                address=address.get(node, ""),
                local_rank=members[node].index(index),
                local_size=len(members[node]),
            )
        )
    return out


def unreachable(controller_ip: str, nodes: list[dict[str, Any]], here: set[str]) -> str:
    """The address of a live Ray node of another machine (not one of *here*, this
    machine's addresses), which a controller on loopback cannot be reached from; ""."""
    if not controller_ip.startswith("127."):
        return ""
    for node in nodes:
        address = str(node.get("NodeManagerAddress", ""))
        if node.get("Alive") and not address.startswith("127.") and address not in here:
            return address
    return ""
