"""ipyparallel's engine-set launcher for Ray: a placement group, one actor per rank.

``RayEngineSetLauncher.start(n)`` connects to the Ray cluster (``rayconnect``: as
``ray.init()`` does), checks that its nodes can reach the controller and could hold
the ranks (else it says so at once, with what is free), reserves a placement group of
one bundle per rank (its CPUs and GPUs; STRICT_PACK for ``--pack``, SPREAD for
``--spread``), waits for it (at most ``place_timeout`` s), then places one
``actor.RankActor`` per bundle, which spawns the rank's engine. Each engine is told its
node and local rank from where its bundle went (node order: the lowest bundle a node
holds), so the kernel orders ranks by (node, local rank) as for every remote launcher.

A thread of the kernel holds each actor's ``wait`` call (``watch``): a rank's end is
told within a second, with Ray's reason. ``stop`` ends the engines
through their actors, kills the actors and removes the placement group; the kernel's
connection to Ray is closed when the last engine set it made is stopped (``connection``).
A scale's leaving rank is ended alone (``leave``): its engine and its actor; its bundle
stays reserved until its engine set stops (Ray removes a placement group whole).

It has the shape of ipyparallel's other engine-set launchers (``launchers``,
``stop_data["engines"]``, ``outputs``) and is registered under the
``ipyparallel.engine_launchers`` entry point as ``dist-notebook-ray`` (so a cluster
file names it in a form ipyparallel loads back).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any

from ipyparallel.cluster.launcher import EngineLauncher
from traitlets import Dict, Float, Integer, List, Unicode

from ... import envvars
from ..errors import ClusterError
from ..rayconnect import NAMESPACE, RayConnectError, free_resources
from . import connection, placement
from .reasons import actor_died
from .watch import WAIT_PERIOD_S, ActorWatch

log = logging.getLogger("dist_notebook")

STOP_TIMEOUT_S = 10.0  # an engine's SIGTERM to SIGKILL, in its actor
STOP_BOUND_S = STOP_TIMEOUT_S + 20.0  # the whole stop through Ray, at most
ACTOR_THREADS = 4  # wait, signal, stop, output may run at once


class RayLaunchError(ClusterError):
    """The ranks could not be placed or started on Ray; the message names the fix (the
    magic shows it as a one-line UsageError, as every ClusterError)."""


class RayEngineLauncher(EngineLauncher):
    """One rank: its actor (``actor.RankActor``) and the engine process it started."""

    actor_name = Unicode().tag(to_dict=True)
    where = Dict(help="the actor's answer to start: pid, actor_pid, host, node_id, node_ip")
    actor: Any = None
    output: str = ""

    def find_args(self) -> list[str]:
        return ["ray actor", self.actor_name]

    @property
    def pid(self) -> int | None:
        return self.where.get("pid")

    def signal(self, sig: int) -> None:
        if self.actor is not None and self.state == "running":
            self.actor.signal.remote(int(sig))

    def get_output(self, remove: bool = False) -> str:
        return self.output

    async def stop(self) -> None:  # the set stops its actors together
        return None


class RayEngineSetLauncher(ActorWatch, EngineLauncher):
    """Engines as Ray actors in one placement group (see the module)."""

    address = Unicode("", config=True, help="the Ray cluster (default: RAY_ADDRESS, else here)")
    cpus_per_rank = Float(1.0, config=True, help="CPUs of each rank's bundle")
    gpus_per_rank = Integer(0, config=True, help="GPUs of each rank's bundle")
    placement = Unicode("", config=True, help="'pack', 'spread' or '' (Ray's PACK)")
    place_timeout = Float(
        30.0, config=True, help="seconds to wait for the placement group (an autoscaling wait)"
    )
    start_timeout = Float(120.0, config=True, help="seconds for the actors to start")
    controller_ip = Unicode("127.0.0.1", config=True, help="where the controller listens")

    group_name = Unicode().tag(to_dict=True)
    actor_names: Any = List().tag(to_dict=True)
    launchers = Dict()
    stop_data = Dict()
    outputs = Dict()
    _hold: int | None = None  # this set's hold on the kernel's connection (connection)
    _leaving: frozenset[str] = frozenset()  # ranks a scale ends (leave): "stopped"

    def find_args(self) -> list[str]:
        return ["ray engine set", self.group_name]

    # --- start -----------------------------------------------------------------------
    def start(self, n: int) -> Any:
        self.n = n
        # The kernel's event loop, taken here on its thread: the watch thread hands each
        # rank's end to it (IOLoop.current() in another thread is another loop).
        self.loop  # noqa: B018  (a trait's default is taken on first read)
        self.group_name = f"dist-notebook-{self.cluster_id}-{self.engine_set_id}"
        return self._start(n)

    async def _start(self, n: int) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        answers = await loop.run_in_executor(None, self._start_actors, n)
        self.notify_start(answers)
        return answers

    def _start_actors(self, n: int) -> list[dict[str, Any]]:
        try:
            ray, self._hold = connection.hold(self.address)
        except RayConnectError as e:
            raise RayLaunchError(str(e)) from None
        try:
            return self._place_and_start(ray, n)
        except BaseException:
            self._remove(ray)
            connection.release(ray, self._hold)
            self._hold = None
            raise

    def _place_and_start(self, ray: Any, n: int) -> list[dict[str, Any]]:
        from ray.util.placement_group import placement_group, placement_group_table
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from .actor import RankActor

        nodes = ray.nodes()
        far = placement.unreachable(self.controller_ip, nodes, _here())
        if far:
            raise RayLaunchError(
                f"--launcher ray: the controller listens on {self.controller_ip}, which the "
                f"Ray node {far} cannot reach; add --interface NAME (or --ip ADDR) for the "
                "network the Ray nodes share"
            )
        wanted = placement.bundles(n, self.cpus_per_rank, self.gpus_per_rank)
        strategy = placement.STRATEGIES[self.placement]
        why = placement.shortfall(wanted, strategy, nodes)
        if why:
            raise RayLaunchError(self._cannot_place(n, why))
        group = placement_group(wanted, strategy=strategy, name=self.group_name)
        self._group = group
        self._wait_placed(ray, group, n)
        table = placement_group_table(group)
        where = {int(b): node for b, node in table["bundles_to_node_id"].items()}
        places = placement.bundle_places(where, ray.nodes())
        remote = ray.remote(
            num_cpus=self.cpus_per_rank,
            num_gpus=self.gpus_per_rank,
            max_concurrency=ACTOR_THREADS,
            max_restarts=0,
        )(RankActor)
        env = {k: v for k, v in self.get_env().items() if k != "IPP_PROFILE_DIR"}
        args = list(self.engine_args)
        starts = []
        for place in places:
            identifier = str(place.bundle)
            name = f"{self.group_name}-{identifier}"
            actor = remote.options(
                name=name,
                namespace=NAMESPACE,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=place.bundle
                ),
            ).remote()
            launcher = RayEngineLauncher(
                parent=self,
                log=self.log,
                loop=self.loop,
                profile_dir=self.profile_dir,
                cluster_id=self.cluster_id,
                identifier=identifier,
                actor_name=name,
            )
            launcher.actor = actor
            self.launchers[identifier] = launcher
            self.actor_names.append(name)
            launcher.on_stop(self._notice_engine_stopped)
            rank_env = {
                **env,
                envvars.NODE: str(place.node),
                envvars.LOCAL_RANK: str(place.local_rank),
                envvars.LOCAL_SIZE: str(place.local_size),
            }
            starts.append(actor.start.remote(args, rank_env, os.getcwd(), self.cpus_per_rank))
        answers = self._started(ray, starts)
        for launcher, answer in zip(self.launchers.values(), answers, strict=True):
            launcher.where = answer
            launcher.notify_start(answer)
        self._start_watch()
        return list(answers)

    def _cannot_place(self, n: int, why: str) -> str:
        each = f"{self.cpus_per_rank:g} CPU" + (
            f" and {self.gpus_per_rank} GPU" if self.gpus_per_rank else ""
        )
        return (
            f"--launcher ray cannot place {n} rank{'s' if n > 1 else ''} of {each} each: {why} "
            f"(free now: {free_resources()}); start fewer ranks (-n), ask less per rank, or "
            "add Ray nodes"
        )

    def _wait_placed(self, ray: Any, group: Any, n: int) -> None:
        ready = group.ready()
        deadline = time.monotonic() + self.place_timeout
        while True:
            done, _ = ray.wait([ready], timeout=WAIT_PERIOD_S)
            if done:
                return
            if time.monotonic() > deadline:
                raise RayLaunchError(
                    self._cannot_place(
                        n, f"not enough is free within --timeout {self.place_timeout:g} s"
                    )
                )

    def _started(self, ray: Any, starts: list[Any]) -> list[dict[str, Any]]:
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return list(ray.get(starts, timeout=self.start_timeout))
        except GetTimeoutError:
            raise RayLaunchError(
                f"the ranks' Ray actors did not start within {self.start_timeout:.0f} s "
                f"(free now: {free_resources()}); check `ray status`, then %dist_cluster restart"
            ) from None
        except RayActorError as e:
            raise RayLaunchError(
                f"a rank's Ray actor died while starting: {actor_died(e)}; check that "
                "dist-notebook is installed on every Ray node (pip install "
                "'dist-notebook[ray]'), then %dist_cluster restart"
            ) from None

    def _notice_engine_stopped(self, data: dict[str, Any]) -> None:
        identifier = data["identifier"]
        launcher = self.launchers.pop(identifier, None)
        if launcher is not None:
            self.outputs[identifier] = launcher.get_output()
        self.stop_data.setdefault("engines", {})[identifier] = data
        if not self.launchers:
            codes = [e.get("exit_code") for e in self.stop_data["engines"].values()]
            self.stop_data["exit_code"] = next((c for c in codes if c), codes[0] if codes else None)
            self.notify_stop(self.stop_data)

    # --- signal, stop ----------------------------------------------------------------
    def signal(self, sig: int) -> None:
        for launcher in list(self.launchers.values()):
            launcher.signal(sig)

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        codes = await loop.run_in_executor(None, self._stop_bounded)
        for identifier, launcher in list(self.launchers.items()):
            launcher.notify_stop(
                {
                    "identifier": identifier,
                    "exit_code": codes.get(identifier),
                    "pid": launcher.pid,
                    "host": launcher.where.get("host"),
                    "reason": "stopped",
                }
            )
        if not self.launchers and self.state != "after":
            self.notify_stop(self.stop_data or {"exit_code": None})

    def _stop_bounded(self) -> dict[str, int | None]:
        """``_stop_actors``, given up after STOP_BOUND_S: with the Ray cluster's head
        lost (its GCS gone) Ray's calls block for good, and a stop must still return
        (there is then nothing left in Ray to remove)."""
        box: dict[str, dict[str, int | None]] = {}
        worker = threading.Thread(
            target=lambda: box.setdefault("codes", self._stop_actors()),
            name=f"dist-notebook-ray-stop-{self.group_name}",
            daemon=True,
        )
        worker.start()
        worker.join(STOP_BOUND_S)
        if worker.is_alive():
            log.warning(
                "ray engine set %s: Ray did not answer within %.0f s (its cluster lost?); "
                "stopped without it",
                self.group_name,
                STOP_BOUND_S,
            )
            connection.abandon(self._hold)
            self._hold = None
        return box.get("codes", {})

    def _stop_actors(self) -> dict[str, int | None]:
        import sys

        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            return {}
        self._stopping = True
        launchers = dict(self.launchers)
        stops = {i: el.actor.stop.remote(STOP_TIMEOUT_S) for i, el in launchers.items() if el.actor}
        codes: dict[str, int | None] = {}
        for identifier, ref in stops.items():
            try:
                codes[identifier] = ray.get(ref, timeout=STOP_TIMEOUT_S + 5)
            except Exception as e:  # an actor already dead: its engine died with it
                log.debug("stopping %s: %s", identifier, e)
                codes[identifier] = None
        self._remove(ray)
        connection.release(ray, self._hold)
        self._hold = None
        return codes

    def leave(self, pid: int) -> None:
        """End the rank whose engine is *pid* (a scale's): its engine, then its actor;
        its end is told as "stopped". Blocking (an executor's thread)."""
        import ray

        identifier = next((i for i, el in self.launchers.items() if el.pid == pid), None)
        if identifier is None:
            return
        launcher = self.launchers[identifier]
        self._leaving = self._leaving | {identifier}
        try:
            ray.get(launcher.actor.stop.remote(STOP_TIMEOUT_S), timeout=STOP_TIMEOUT_S + 5)
        except Exception as e:  # its actor already dead: its engine died with it
            log.debug("leaving %s: %s", identifier, e)
        try:
            ray.kill(launcher.actor, no_restart=True)
        except Exception as e:  # already dead
            log.debug("ray.kill %s: %s", launcher.actor_name, e)

    def _remove(self, ray: Any) -> None:
        """Kill this set's actors and remove its placement group (nothing of ours is
        left in Ray's state: ``ray list actors``, ``ray list placement-groups``)."""
        from ray.util.placement_group import remove_placement_group

        self._stopping = True
        for launcher in self.launchers.values():
            if launcher.actor is not None:
                try:
                    ray.kill(launcher.actor, no_restart=True)
                except Exception as e:  # already dead
                    log.debug("ray.kill %s: %s", launcher.actor_name, e)
        group = getattr(self, "_group", None)
        if group is not None:
            try:
                remove_placement_group(group)
            except Exception as e:  # already removed
                log.debug("remove_placement_group %s: %s", self.group_name, e)
            self._group = None

    def get_output(self, remove: bool = False) -> str:
        for identifier, launcher in self.launchers.items():
            self.outputs[identifier] = launcher.get_output()
        return "\n".join(f"Output for engine {i}\n{out}" for i, out in self.outputs.items() if out)


def _here() -> set[str]:
    """This machine's addresses."""
    import socket

    import psutil

    return {
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family in (socket.AF_INET, socket.AF_INET6)
    }
