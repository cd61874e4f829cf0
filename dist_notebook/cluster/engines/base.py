"""What every engines strategy answers: how engines of one launcher start, stop and scale.

A cluster composes one ``EnginesStrategy`` (``engines.strategy_for(spec.launcher)``)
and asks it whatever differs by launcher; no other module branches on the launcher's
name. The four strategies sit beside this file, one per launcher: ``local.py`` (ranks
are processes of this machine), ``ssh.py``, ``mpi.py`` and ``slurm.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

# (ranks to start, their environment, traits of their engine set) of one engine set.
Start = tuple[int, dict[str, str], dict[str, Any]]

SLURM_ONLY = (
    ("--nodes", "nodes"),
    ("--partition", "partition"),
    ("--time", "time_limit"),
    ("--account", "account"),
)


class EnginesStrategy(ABC):
    """How one launcher's engines are started, placed, watched, scaled and reached."""

    name: ClassVar[str]
    # The ranks are processes of this machine: the kernel sees their exits, signals
    # their pids (stacks, SIGCONT), cleans what they leave in /dev/shm, and checks that
    # memory and the process limit fit them. Remote ranks get none of that.
    on_this_machine: ClassVar[bool] = False
    # The user lays out the ranks on hosts (--hosts, scale --hosts).
    takes_hosts: ClassVar[bool] = False

    # --- spec ----------------------------------------------------------------------
    def validate(self, spec: Any) -> None:
        """Refuse options this launcher does not take (HostsError, naming the fix)."""
        from ..hosts import HostsError

        if spec.hosts and not self.takes_hosts:
            raise HostsError(
                f"--hosts is for --launcher ssh or mpi, not {self.name}; "
                "Slurm picks the hosts: use --nodes N"
            )
        self.check_own(spec)
        given = [flag for flag, field in SLURM_ONLY if getattr(spec, field)]
        if given:
            raise HostsError(f"{given[0]} is a Slurm option: add --launcher slurm")

    def check_own(self, spec: Any) -> None:
        """This launcher's own checks of *spec* (HostsError); none by default."""
        return None

    def ranks_per_host(self, spec: Any) -> int:
        """Ranks the kernel counts on each host (threads, LOCAL_WORLD_SIZE); remote
        hosts count their own at boot (``engine.rankenv``)."""
        return 1

    def threads(self, spec: Any) -> int | None:
        """Each rank's thread count after a scale (None: each host decides)."""
        return spec.threads  # type: ignore[no-any-return]

    # --- start ---------------------------------------------------------------------
    @abstractmethod
    def engine_launcher(self, spec: Any) -> tuple[type, dict[str, dict[str, Any]]]:
        """ipyparallel's engine-set launcher class, and its configuration."""

    @staticmethod
    def configured(
        launcher: type, spec: Any, traits: dict[str, Any]
    ) -> tuple[type, dict[str, dict[str, Any]]]:
        """*launcher* with *traits*, the user's ``--launcher-config`` over them."""
        return launcher, {launcher.__name__: {**traits, **spec.launcher_config}}

    def engine_env(self, spec: Any, env: dict[str, str]) -> dict[str, str]:
        """The engines' environment, from the one a local engine gets (*env*)."""
        from ..hosts import remote_engine_env

        return remote_engine_env(spec, env)

    def engine_args(self, spec: Any) -> list[str]:
        """Engine options of this launcher only (``launchers.engine_args`` adds these)."""
        return []

    # --- scale ---------------------------------------------------------------------
    def scale_refusal(self, spec: Any, old: int, n: int, hosts: str | None) -> str | None:
        """Why scaling from *old* to *n* ranks cannot be done, or None."""
        if hosts and not self.takes_hosts:
            return (
                f"scale --hosts is for --launcher ssh or mpi; with --launcher {self.name} "
                "give the number of ranks only (scale N)"
            )
        return None

    def scale_starts(
        self,
        spec: Any,
        added: int,
        target: dict[str, int],
        have: dict[str, int],
        base_env: dict[str, str],
    ) -> list[Start]:
        """The engine sets that add *added* ranks: *target* is every host's rank count
        after the scale (ssh, mpi), *have* what each has now."""
        raise NotImplementedError(f"--launcher {self.name} scales by other means")

    def engine_stopper(self, engine_set: Any, host: str, pid: int) -> Any:
        """The launcher that stops the one engine *pid* on *host* by a signal, or None:
        the engine then leaves through ipyparallel's shutdown request."""
        return None

    # --- what the kernel can reach -------------------------------------------------
    def sync_hosts(self, spec: Any) -> list[str]:
        """The hosts ``%dist_sync`` copies a folder to (SyncError where it cannot)."""
        return [host for host, count in spec.hosts if count > 0]

    def stacks_refusal(self) -> str | None:
        """Why the ranks' stacks cannot be collected from this kernel, or None."""
        return (
            f"stacks needs local engines (--launcher local): the ranks of --launcher "
            f"{self.name} run on other hosts, where this kernel cannot signal them"
        )


class HostListEngines(EnginesStrategy):
    """The ranks laid out by the user on named hosts (``--hosts h1:2,h2:2``): ssh, mpi."""

    takes_hosts: ClassVar[bool] = True

    def check_own(self, spec: Any) -> None:
        from ..hosts import HostsError, format_hosts

        if not spec.hosts:
            raise HostsError(
                f"--launcher {self.name} needs --hosts, e.g. --hosts node1:2,node2:2 "
                "(hosts you can ssh to without a password)"
            )
        total = sum(n for _, n in spec.hosts)
        if spec.n != total:
            raise HostsError(
                f"-n {spec.n} but --hosts {format_hosts(spec.hosts)} has {total} ranks; "
                "drop -n (it follows --hosts) or change the counts"
            )
        if spec.gpus_per_node:
            over = [f"{h}:{n}" for h, n in spec.hosts if n > spec.gpus_per_node]
            if over:
                raise HostsError(
                    f"--hosts {over[0]} asks for more ranks than --gpus-per-node "
                    f"{spec.gpus_per_node}: one GPU per rank"
                )
