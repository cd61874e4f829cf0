"""Ranks on this machine: engines forked from the kernel's fork server (or spawned).

What differs from the remote launchers: the kernel is each engine's parent (they end
with it), it sees an engine's exit at once, signals pids (stacks, SIGCONT), counts the
cores over the ranks for their threads, and checks memory and the process limit
before a start or a scale (``cluster.limits``). Engines run without a nanny process.
A scale starts N - n more engines with ranks n..N-1 or stops the engines of ranks
N..n-1 through their own launchers (their exits are no deaths: health buries them).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, ClassVar

from ... import envvars
from ..hosts import HostsError
from .base import EnginesStrategy, Resized, ScalePlan

if TYPE_CHECKING:
    from ..scale import Scalable
    from ..spec import ClusterSpec


class LocalEngines(EnginesStrategy):
    name: ClassVar[str] = "local"
    on_this_machine: ClassVar[bool] = True

    def check_own(self, spec: ClusterSpec) -> None:
        if spec.gpus_per_node:
            raise HostsError("--gpus-per-node is for remote launchers; on this machine use --gpus")

    def ranks_per_host(self, spec: ClusterSpec) -> int:
        return int(spec.n)

    def threads(self, spec: ClusterSpec) -> int | None:
        return int(spec.resolved_threads)

    def engine_launcher(self, spec: ClusterSpec) -> tuple[type, dict[str, dict[str, Any]]]:
        from ..launchers import RankEngineSetLauncher

        return RankEngineSetLauncher, {}

    def engine_env(self, spec: ClusterSpec, env: dict[str, str]) -> dict[str, str]:
        # The kernel is the engines' parent: they end with it (engine/parent.py).
        return {**env, envvars.PARENT_PID: str(os.getpid())}

    def engine_args(self, spec: ClusterSpec) -> list[str]:
        # No nanny process per engine: the engine answers signals itself
        # (boot/engine.py) and the kernel sees a local engine's exit directly.
        return ["--IPEngine.enable_nanny=False"]

    def sync_hosts(self, spec: ClusterSpec) -> list[str]:
        return []

    def stacks_refusal(self) -> str | None:
        return None

    async def resize(self, cluster: Scalable, plan: ScalePlan) -> Resized:
        n = plan.n
        if n > cluster.n:
            client = cluster.require_client()
            before = set(client.ids)
            kept = [r.engine_id for r in cluster.ranks]
            added = n - cluster.n
            cluster.update(spec=_resized(cluster.spec, n))
            cluster.progress(f"starting {added} engine{'s' if added > 1 else ''}")
            await cluster.engines.start_engines(added, cluster.engine_env(n - added))
            await cluster.engines.wait_for_engines(before, added)
            return Resized(kept + sorted(set(client.ids) - before))
        leaving = [r for r in cluster.ranks if r.rank >= n]
        cluster.progress(f"stopping rank{'s' if len(leaving) > 1 else ''} {leaving[0].rank}..")
        pids = {r.pid for r in leaving}
        for set_id, engine_set in cluster.engines.engine_sets():
            for identifier, launcher in list(getattr(engine_set, "launchers", {}).items()):
                if getattr(launcher, "pid", None) in pids:
                    cluster.health.bury(set_id, identifier)  # first: a stopped engine is no death
                    await launcher.stop()
        cluster.update(
            spec=_resized(cluster.spec, n), ranks=[r for r in cluster.ranks if r.rank < n]
        )
        return Resized([r.engine_id for r in cluster.ranks])


def _resized(spec: ClusterSpec, n: int) -> ClusterSpec:
    """*spec* with *n* ranks (and its first *n* GPUs)."""
    return dataclasses.replace(spec, n=n, gpus=spec.gpus[:n] if spec.gpus else ())
