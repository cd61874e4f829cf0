"""What Ray's state API says of our actors and placement groups (as `ray list` shows)."""

from __future__ import annotations

from typing import Any


def ours(cluster: Any, address: str | None = None) -> tuple[list[Any], list[Any]]:
    """The cluster's live actors and placement groups, from Ray's state API (as `ray
    list` shows them: named after its ipyparallel cluster id)."""
    from ray.util.state import list_actors, list_placement_groups

    # None: every cluster's (a failed start may have no ipyparallel cluster left)
    prefix = f"dist-notebook-{cluster.engines.ipp_cluster_id}-" if cluster else "dist-notebook-"
    # *address*: the Ray cluster's, for a process not connected to it
    listed = list_actors(address=address, detail=True, limit=1000)
    actors = [a for a in listed if (a.name or "").startswith(prefix)]
    pgs = list_placement_groups(address=address, limit=1000)
    groups = [g for g in pgs if (g.name or "").startswith(prefix)]
    return [a for a in actors if a.state != "DEAD"], [g for g in groups if g.state != "REMOVED"]


def actor_pids(cluster: Any) -> dict[str, int]:
    """{actor name: its worker process's pid} of the cluster's live actors."""
    return {a.name: int(a.pid) for a in ours(cluster)[0]}
