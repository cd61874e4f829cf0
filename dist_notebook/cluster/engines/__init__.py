"""Engines strategies: what differs by launcher, one file per launcher.

``strategy_for(name)`` is the one place a launcher's name becomes behaviour; the rest
of the package asks the strategy (``EnginesStrategy`` in ``base.py``) and branches on
no launcher name. What Slurm does differently is in ``slurm.py``; ssh in ``ssh.py``,
MPI in ``mpi.py``, ranks on this machine in ``local.py``; what the three remote ones
share (how a scale removes and adds their engines) in ``remote.py``.
"""

from __future__ import annotations

# (The Ray launcher is a package of its own, cluster/rayengines; it imports Ray only
# when a Ray cluster starts.)
from ..rayengines.strategy import RayEngines
from .base import EnginesStrategy, Resized, ScalePlan, Start
from .local import LocalEngines
from .mpi import MPIEngines
from .remote import HostListEngines, RemoteEngines
from .slurm import SlurmEngines
from .ssh import SSHEngines

STRATEGIES: dict[str, EnginesStrategy] = {
    s.name: s for s in (LocalEngines(), MPIEngines(), SSHEngines(), SlurmEngines(), RayEngines())
}
LAUNCHERS = tuple(STRATEGIES)  # local, mpi, ssh, slurm, ray: as --launcher lists them


def strategy_for(launcher: str) -> EnginesStrategy:
    """The strategy of *launcher* (KeyError for a name ClusterSpec would refuse)."""
    return STRATEGIES[launcher]


__all__ = [
    "LAUNCHERS",
    "STRATEGIES",
    "EnginesStrategy",
    "HostListEngines",
    "LocalEngines",
    "MPIEngines",
    "RemoteEngines",
    "Resized",
    "ScalePlan",
    "SSHEngines",
    "SlurmEngines",
    "Start",
    "strategy_for",
]
