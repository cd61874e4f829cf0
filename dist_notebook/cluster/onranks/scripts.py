"""Run a torchrun-style script on every rank, its own process group included."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...engine import group, script
from .execute import OutputSink, apply_on_ranks

if TYPE_CHECKING:
    from ..kind import Cluster


def run_script(
    cluster: Cluster, path: str, argv: list[str], *, sink: OutputSink | None = None
) -> dict[int, int]:
    """Run *path* on all ranks; return {rank: exit status}.

    Our group is torn down first (a script creates its own with
    ``init_process_group()``); rank 0 starts a fresh store for the script's rendezvous,
    and our group is re-created afterwards, so the ranks' Python state is kept.
    """
    apply_on_ranks(cluster, group.destroy_group)
    addr = cluster.master_addr or cluster.spec.ip  # rank 0's own address on remote hosts
    store = apply_on_ranks(cluster, group.host_store, addr, cluster.spec.timeout, ranks=[0])
    port = store[0].value
    # A rank failing before its rendezvous has rank 0 close this store, freeing the rest.
    apply_on_ranks(cluster, group.guard_rendezvous, addr, port, ranks=[0])
    apply_on_ranks(cluster, group.export_rendezvous, addr, port)
    try:
        outputs = apply_on_ranks(cluster, script.run_script, path, argv, sink=sink)
        return {o.rank: int(o.value) for o in outputs}
    finally:
        apply_on_ranks(cluster, group.destroy_group)
        from ..loop import run_sync

        run_sync(cluster.init_group())
