"""Ranks on named hosts under one mpiexec (``--launcher mpi --hosts h1:2,h2:2``).

What differs: one mpiexec starts the whole engine set (``launchers.RankMPIEngineSetLauncher``,
Open MPI's rank variables, no mpi4py); its options keep one rank's death from ending
the others (``launchers.mpi_args``); a scale starts one mpiexec per host that grows,
told where that host's local ranks start; a single engine leaves through
ipyparallel's shutdown request; an engine of the first mpiexec names no host of its
own: its MPI rank and the mpiexec's ``--host`` say which; ``%dist_sync`` copies to the
hosts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ... import envvars
from .base import Start
from .remote import HostListEngines

if TYPE_CHECKING:
    from ..spec import ClusterSpec


class MPIEngines(HostListEngines):
    name: ClassVar[str] = "mpi"

    def engine_launcher(self, spec: ClusterSpec) -> tuple[type, dict[str, dict[str, Any]]]:
        from ..launchers import RankMPIEngineSetLauncher, mpi_args

        traits: dict[str, Any] = {"mpi_args": mpi_args(spec)}
        return self.configured(RankMPIEngineSetLauncher, spec, traits)

    def scale_starts(
        self,
        spec: ClusterSpec,
        added: int,
        target: dict[str, int],
        have: dict[str, int],
        base_env: dict[str, str],
    ) -> list[Start]:
        from ..launchers import mpi_args

        starts: list[Start] = []
        for host in target:
            count = target[host] - have.get(host, 0)
            if count <= 0:
                continue
            env = dict(base_env)
            env[envvars.LOCAL_OFFSET] = str(have.get(host, 0))
            env[envvars.LOCAL_SIZE] = str(target[host])
            env[envvars.HOST_NAME] = host
            starts.append((count, env, {"mpi_args": mpi_args(spec, ((host, count),))}))
        return starts

    def host_by_launch(self, engine_set: Any, origin: dict[str, Any]) -> str | None:
        from ..placement import mpi_hosts

        layout = mpi_hosts(list(getattr(engine_set, "mpi_args", [])))
        rank = origin["mpi_rank"]
        return layout[rank] if rank is not None and rank < len(layout) else None
