"""Ranks in Slurm jobs (``--launcher slurm --nodes N``): Slurm picks the hosts.

What differs: the engine set is one batch job whose script ``srun``s a task per rank
(``launchers.RankSlurmEngineSetLauncher``, fields from ``launchers.slurm_namespace``);
only this launcher takes ``--nodes``, ``--partition``, ``--time`` and ``--account``
(``-n`` must split evenly over the nodes, and with ``--gpus-per-node`` a node runs
that many ranks); ``--hosts`` is refused; a scale submits one more job for the added
ranks (whole nodes with GPUs) and removes the newest job's ranks first; a single
engine leaves through ipyparallel's shutdown request; ``%dist_sync`` is refused (the
nodes may take no ssh).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

from ..hosts import HostsError
from .base import BatchDefaults, Start
from .remote import RemoteEngines

if TYPE_CHECKING:
    from ..spec import ClusterSpec

_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")  # MINUTES, H:MM:SS, D-HH:MM ...


class SlurmEngines(RemoteEngines):
    name: ClassVar[str] = "slurm"

    def validate(self, spec: ClusterSpec) -> None:
        if spec.hosts:
            raise HostsError(
                f"--hosts is for --launcher ssh or mpi, not {self.name}; "
                "Slurm picks the hosts: use --nodes N"
            )
        nodes = spec.nodes or 1
        # After a scale the jobs' layouts are their own: no even split to check.
        if not spec.scaled and spec.n % nodes:
            raise HostsError(
                f"-n {spec.n} ranks do not split evenly over --nodes {nodes}; "
                f"use a multiple of {nodes} (each node runs the same number of ranks)"
            )
        elif not spec.scaled and spec.gpus_per_node and spec.n // nodes != spec.gpus_per_node:
            raise HostsError(
                f"--gpus-per-node {spec.gpus_per_node} means {spec.gpus_per_node} ranks a node: "
                f"drop -n, or use -n {nodes * spec.gpus_per_node}"
            )
        if spec.time_limit and not _TIME.match(spec.time_limit):
            raise HostsError(
                f"--time {spec.time_limit!r} is not a Slurm time; write MINUTES, H:MM:SS or D-HH:MM"
            )

    def engine_launcher(self, spec: ClusterSpec) -> tuple[type, dict[str, dict[str, Any]]]:
        from ..launchers import RankSlurmEngineSetLauncher, slurm_namespace

        traits: dict[str, Any] = {
            "namespace": slurm_namespace(spec.n, spec.nodes or 1, spec.gpus_per_node)
        }
        for trait, value in (
            ("queue", spec.partition),
            ("timelimit", spec.time_limit),
            ("account", spec.account),
        ):
            if value:
                traits[trait] = value
        return self.configured(RankSlurmEngineSetLauncher, spec, traits)

    def scale_refusal(self, spec: ClusterSpec, old: int, n: int, hosts: str | None) -> str | None:
        refusal = super().scale_refusal(spec, old, n, hosts)
        gpn = spec.gpus_per_node
        if refusal is None and gpn and n > old and (n - old) % gpn:
            refusal = (
                f"scale {n}: with --gpus-per-node {gpn} Slurm adds whole nodes; "
                f"add a multiple of {gpn} ranks"
            )
        return refusal

    def scale_starts(
        self,
        spec: ClusterSpec,
        added: int,
        target: dict[str, int],
        have: dict[str, int],
        base_env: dict[str, str],
    ) -> list[Start]:
        from ..launchers import slurm_namespace

        gpn = spec.gpus_per_node
        # With GPUs the job takes whole nodes (scale_refusal asked for a multiple of gpn).
        nodes = added // gpn if gpn else spec.nodes or 1
        return [(added, dict(base_env), {"namespace": slurm_namespace(added, nodes, gpn)})]

    def grow_where(self, grow: dict[str, int]) -> str:
        return "in a new Slurm job"

    def batch_defaults(self, spec: ClusterSpec) -> BatchDefaults:
        """A Slurm cluster's job as the batch job's: its nodes, GPUs and settings."""
        return BatchDefaults(
            nodes=spec.nodes,
            gpus_per_node=spec.gpus_per_node,
            partition=spec.partition,
            time_limit=spec.time_limit,
            account=spec.account,
        )

    def sync_hosts(self, spec: ClusterSpec) -> list[str]:
        from ..sync import SyncError

        raise SyncError(
            "%dist_sync copies over ssh, which a Slurm cluster's nodes may not take: keep "
            "the code on a file system the nodes share (or start with --launcher ssh)"
        )
