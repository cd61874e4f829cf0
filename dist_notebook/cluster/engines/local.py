"""Ranks on this machine: engines forked from the kernel's fork server (or spawned).

What differs from the remote launchers: the kernel is each engine's parent (they end
with it), it sees an engine's exit at once, signals pids (stacks, SIGCONT), counts the
cores over the ranks for their threads, and checks memory and the process limit
before a start or a scale (``cluster.limits``). Engines run without a nanny process.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from ... import envvars
from .base import EnginesStrategy


class LocalEngines(EnginesStrategy):
    name: ClassVar[str] = "local"
    on_this_machine: ClassVar[bool] = True

    def check_own(self, spec: Any) -> None:
        from ..hosts import HostsError

        if spec.gpus_per_node:
            raise HostsError("--gpus-per-node is for remote launchers; on this machine use --gpus")

    def ranks_per_host(self, spec: Any) -> int:
        return int(spec.n)

    def threads(self, spec: Any) -> int | None:
        return int(spec.resolved_threads)

    def engine_launcher(self, spec: Any) -> tuple[type, dict[str, dict[str, Any]]]:
        from ..launchers import RankEngineSetLauncher

        return RankEngineSetLauncher, {}

    def engine_env(self, spec: Any, env: dict[str, str]) -> dict[str, str]:
        # The kernel is the engines' parent: they end with it (engine/parent.py).
        return {**env, envvars.PARENT_PID: str(os.getpid())}

    def engine_args(self, spec: Any) -> list[str]:
        # No nanny process per engine: the engine answers signals itself
        # (engine/boot.py) and the kernel sees a local engine's exit directly.
        return ["--IPEngine.enable_nanny=False"]

    def sync_hosts(self, spec: Any) -> list[str]:
        return []

    def stacks_refusal(self) -> str | None:
        return None
