"""What a cluster is asked to be: a frozen, validated specification."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .engines import LAUNCHERS, EnginesStrategy, strategy_for
from .hosts import HostsError, listen_ip, parse_hosts
from .placement import threads_per_rank

BACKENDS = ("auto", "nccl", "gloo")


class ClusterConfigError(ValueError):
    """A cluster was asked for something it cannot be; the message names the fix."""


@dataclass(frozen=True)
class ClusterSpec:
    """How many ranks, on which devices, with which backend and limits.

    ``gpus`` empty means CPU ranks. ``threads`` None means cores divided by the ranks
    on this host (engines otherwise each take every core and oversubscribe).
    """

    n: int = 2
    gpus: tuple[int, ...] = ()
    backend: str = "auto"
    timeout: float = 30.0
    threads: int | None = None
    ip: str = "127.0.0.1"
    launcher: str = "local"
    heartbeat_ms: int = 500
    start_timeout: float = 120.0
    auto_restart: bool = False
    # Start more local ranks than memory seems to allow (see cluster/limits.py).
    force: bool = False
    extra_engine_env: dict[str, str] = field(default_factory=dict)
    # Beyond one machine (see cluster/hosts.py): --hosts for ssh/mpi, the rest for Slurm;
    # launcher_config sets traits of ipyparallel's engine launcher (e.g. ssh_args).
    hosts: tuple[tuple[str, int], ...] = ()
    nodes: int | None = None
    gpus_per_node: int = 0
    partition: str = ""
    time_limit: str = ""
    account: str = ""
    launcher_config: dict = field(default_factory=dict)
    # --launcher ray (cluster/rayengines): the Ray cluster ("": RAY_ADDRESS, else one
    # running here), each rank's bundle, and "pack" / "spread" (--pack, --spread).
    ray_address: str = ""
    cpus_per_rank: float = 1.0
    gpus_per_rank: int = 0
    ray_placement: str = ""
    # Set by scale: the rank count changed between cells, so Slurm's ranks need not
    # split evenly over --nodes any more (each job that scale adds has its own layout).
    scaled: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ClusterConfigError(
                f"-n must be a whole number of ranks, 1 or more (got {self.n!r})"
            )
        if self.gpus and len(self.gpus) != self.n:
            raise ClusterConfigError(
                f"{self.n} ranks but {len(self.gpus)} GPUs listed ({_ids(self.gpus)}): "
                f"give one GPU per rank, e.g. --gpus {_ids(range(self.n))}, or drop -n"
            )
        if len(set(self.gpus)) != len(self.gpus):
            raise ClusterConfigError(
                f"--gpus lists a GPU twice ({_ids(self.gpus)}): one GPU per rank"
            )
        if self.backend not in BACKENDS:
            raise ClusterConfigError(
                f"--backend must be one of {', '.join(BACKENDS)} (got {self.backend!r})"
            )
        if self.backend == "nccl" and not (self.gpus or self.gpus_per_node or self.gpus_per_rank):
            raise ClusterConfigError(
                "--backend nccl needs GPUs: pass --gpus, or use --backend gloo for CPU ranks"
            )
        if not self.timeout > 0:
            raise ClusterConfigError(
                f"--timeout must be a positive number of seconds (got {self.timeout!r})"
            )
        if self.threads is not None and self.threads < 1:
            raise ClusterConfigError(f"--threads must be 1 or more (got {self.threads!r})")
        if self.launcher not in LAUNCHERS:
            raise ClusterConfigError(
                f"--launcher must be one of {', '.join(LAUNCHERS)} (got {self.launcher!r})"
            )
        ray_only = [f"{name}= ({flag})" for name, flag, given in _ray_only(self) if given]
        if ray_only and not strategy_for(self.launcher).takes_ray_fields:
            raise ClusterConfigError(
                f"{ray_only[0]} is an option of Ray clusters: add launcher='ray' (--launcher ray)"
            )
        try:
            strategy_for(self.launcher).validate(self)
        except HostsError as e:
            raise ClusterConfigError(str(e)) from None

    @property
    def resolved_backend(self) -> str:
        """nccl when every rank has a GPU, else gloo (for ``auto``)."""
        if self.backend != "auto":
            return self.backend
        return "nccl" if self.gpus or self.gpus_per_node or self.gpus_per_rank else "gloo"

    @property
    def engines(self) -> EnginesStrategy:
        """What this spec's launcher does differently (``cluster/engines``)."""
        return strategy_for(self.launcher)

    @property
    def resolved_threads(self) -> int:
        return threads_per_rank(os.cpu_count(), self.engines.ranks_per_host(self), self.threads)


def _ids(ids: object) -> str:
    return ",".join(str(i) for i in ids)  # type: ignore[attr-defined]


def remote_spec(args: Any) -> ClusterSpec:
    """A ClusterSpec for ``--launcher ssh|mpi|slurm`` from the magic's parsed flags."""
    if args.gpus is not None:
        raise HostsError("--gpus names GPUs of this machine; on other hosts use --gpus-per-node G")
    hosts = parse_hosts(args.hosts) if args.hosts else ()
    ip = listen_ip(args.ip, args.interface)
    # (a remote spec: hosts or nodes with --launcher local are refused before this)
    if ip.startswith("127."):
        raise HostsError(
            f"--launcher {args.launcher}: the controller would listen on {ip}, which other "
            "hosts cannot reach; add --interface NAME (or --ip ADDR) for the network the "
            "hosts share"
        )
    gpn = args.gpus_per_node or 0
    if hosts:
        n = sum(c for _, c in hosts)
        if args.n and args.n != n:
            n = args.n  # ClusterSpec says what is wrong
    else:
        n = args.n or (args.nodes or 1) * max(1, gpn)
    return ClusterSpec(
        n=n,
        backend=args.backend,
        timeout=args.timeout,
        threads=args.threads,
        ip=ip,
        launcher=args.launcher,
        auto_restart=args.auto_restart,
        hosts=hosts,
        nodes=args.nodes,
        gpus_per_node=gpn,
        partition=args.partition or "",
        time_limit=args.time or "",
        account=args.account or "",
    )


def _ray_only(spec: ClusterSpec) -> list[tuple[str, str, object]]:
    """The fields only --launcher ray takes: (field, flag, whether it is given)."""
    return [
        ("ray_address", "--address", spec.ray_address),
        ("gpus_per_rank", "--gpus-per-rank", spec.gpus_per_rank),
        ("ray_placement", "--pack/--spread", spec.ray_placement),
        ("cpus_per_rank", "CPUs per rank", spec.cpus_per_rank != 1.0),
    ]
