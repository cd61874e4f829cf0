"""Ranks on named hosts, one ssh per engine (``--launcher ssh --hosts h1:2,h2:2``).

What differs: each engine is its own ssh process (``launchers.RankSSHEngineLauncher``)
told its node and local rank in its environment; a scale adds one engine set naming
every host in node order and where each host's new local ranks start; a single
engine leaves by a signal through its own ssh; ``%dist_sync`` copies to the hosts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from .base import Start
from .remote import HostListEngines

if TYPE_CHECKING:
    from ..spec import ClusterSpec


class SSHEngines(HostListEngines):
    name: ClassVar[str] = "ssh"

    def engine_launcher(self, spec: ClusterSpec) -> tuple[type, dict[str, dict[str, Any]]]:
        from ..launchers import RankSSHEngineSetLauncher

        traits: dict[str, Any] = {"engines": dict(spec.hosts)}
        return self.configured(RankSSHEngineSetLauncher, spec, traits)

    def scale_starts(
        self,
        spec: ClusterSpec,
        added: int,
        target: dict[str, int],
        have: dict[str, int],
        base_env: dict[str, str],
    ) -> list[Start]:
        from ..placement import growth

        grow = growth(target, have)
        traits = {
            "engines": grow,
            "hosts": list(target),
            "first_local": {h: have.get(h, 0) for h in grow},
            "local_sizes": {h: target[h] for h in grow},
        }
        return [(added, dict(base_env), traits)]

    def engine_stopper(self, engine_set: Any, host: str, pid: int) -> Any:
        for identifier, launcher in getattr(engine_set, "launchers", {}).items():
            if identifier.rpartition("/")[0] == host and getattr(launcher, "pid", None) == pid:
                return launcher
        return None
