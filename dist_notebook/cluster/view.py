"""What every kind of cluster reads the same way: its facts and its engines' client.

A cluster this kernel started (``cluster.DistCluster``) and one a keeper process holds
(``detached.attached.AttachedCluster``) each own a ``ClusterFacts`` (the one door of the
state, spec, rank table and failure: facts.py) and an ``Engines`` (the ipyparallel client:
ippengines.py); this base reads them and sends the ranks what goes through the client
alone (an interrupt, a new process group). Lifecycle is each kind's own.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import replace

import ipyparallel as ipp

from ..protocol import ClusterState
from . import wiring
from .errors import ClusterError
from .facts import ClusterFacts, RankInfo
from .ippengines import Engines
from .spec import ClusterSpec

Progress = Callable[[str], None]


class ClusterView:
    """Read side of a cluster's facts and engines (set by the subclass's __init__)."""

    id: str
    backend: str
    facts: ClusterFacts[ClusterSpec]
    engines: Engines
    progress: Progress
    master_addr: str | None
    pair_ports: list[int]
    _generation: int  # of the default process group (engine/group.py's store prefix)

    @property
    def state(self) -> ClusterState:
        return self.facts.state

    @property
    def spec(self) -> ClusterSpec:
        return self.facts.spec

    @property
    def ranks(self) -> list[RankInfo]:
        """The rank table, in rank order (a copy: it changes only through the facts)."""
        return self.facts.ranks

    @property
    def failure(self) -> str | None:
        """Why the cluster cannot work until restarted (the controller died), or None."""
        return self.facts.failure

    @property
    def n(self) -> int:
        return self.spec.n

    @property
    def client(self) -> ipp.Client | None:
        """The ipyparallel client of the engines (None before a start and after a stop)."""
        return self.engines.client

    def engine_ids(self, ranks: list[int] | None = None) -> list[int]:
        """ipyparallel engine ids for *ranks* (all ranks by default), in rank order."""
        return self.facts.engine_ids(ranks)

    def rank_of(self, engine_id: int) -> int:
        return self.facts.rank_of(engine_id)

    def require_client(self) -> ipp.Client:
        return self.engines.require_client()

    def require_ready(self) -> ipp.Client:
        if self.failure is not None:
            raise ClusterError(self.failure)
        if self.state != ClusterState.READY or self.client is None:
            raise ClusterError(
                f"the cluster is {self.state.value}, not ready: run %dist_cluster start "
                "(or %dist_cluster restart)"
            )
        return self.client

    def interrupt(self, ranks: list[int] | None = None) -> None:
        """Send SIGINT to the ranks' engines (through ipyparallel's control channel)."""
        if self.client is None:
            return
        targets = self.engine_ids(ranks)
        self.client.send_signal(signal.SIGINT, targets=targets, block=False)

    async def init_group(self) -> None:
        """(Re-)create the default process group on every rank."""
        self._generation += 1
        self.pair_ports = await wiring.init_group(
            self.require_client(),
            self.engine_ids(),
            self.spec,
            self.backend,
            self.master_addr or self.spec.ip,  # rank 0's own address on remote hosts
            self._generation,
            self.progress,
        )
        self.facts.update(ranks=[replace(r, backend=self.backend) for r in self.ranks])
