"""What Ray's state API says of our actors and placement groups (as `ray list` shows)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from conftest import session_of
from IPython.utils.capture import capture_output


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


@contextmanager
def ray_cluster(shell: Any, address: str, flags: str = "") -> Iterator[Any]:
    """A 2-rank CPU cluster on the Ray head at *address* (more start *flags* if given),
    the session's current cluster while it lasts; stopped after, the session's cluster
    put back and this kernel's Ray connection closed before the head ends (a driver
    outliving its head would exit)."""
    session = session_of(shell)
    saved, session.cluster = session.cluster, None
    try:
        with capture_output() as cap:
            shell.run_line_magic(
                "dist_cluster", f"start -n 2 --cpu --launcher ray --address {address} {flags}"
            )
        cluster = session.cluster
        assert cluster is not None and cluster.state.value == "ready", cap.stdout
        yield cluster
        cluster.stop_sync()
    finally:
        session.cluster = saved
        import ray

        if ray.is_initialized():
            ray.shutdown()
