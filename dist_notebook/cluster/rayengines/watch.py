"""The watch of an engine set's actors (``launcher``): each rank's end, told at once.

A thread of the kernel holds each actor's ``wait`` call: it returns when the engine
exits, or fails with Ray's reason when the actor or its node dies; that ends the rank's
``RayEngineLauncher`` on the kernel's event loop (``stop_data``: exit code, pid, host,
Ray's reason; "stopped" for a rank a scale ended), which is how the cluster's health
learns of it within a second. The end of an ended engine's log is fetched from its
actor after the news.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .reasons import actor_died, engine_exit

log = logging.getLogger("dist_notebook")

WAIT_PERIOD_S = 0.25  # how often the watch thread looks
OUTPUT_TIMEOUT_S = 5.0


class ActorWatch:
    """The watch part of ``launcher.RayEngineSetLauncher`` (see the module)."""

    launchers: Any
    outputs: Any
    loop: Any
    group_name: str
    _leaving: frozenset[str]
    _stopping: bool = False  # the set's stop began: the watch ends, nothing more is told

    def _start_watch(self) -> None:
        self._watch = threading.Thread(
            target=self._watch_actors, name=f"dist-notebook-ray-{self.group_name}", daemon=True
        )
        self._watch.start()

    def _watch_actors(self) -> None:
        import ray

        pending = {
            launcher.actor.wait.remote(): identifier
            for identifier, launcher in self.launchers.items()
        }
        while pending and not self._stopping:
            try:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_PERIOD_S)
            except Exception as e:  # the connection closed under us: nothing to watch
                log.debug("ray watch %s: %s", self.group_name, e)
                return
            for ref in done:
                identifier = pending.pop(ref)
                if self._stopping:
                    return
                data = self._ended(ray, identifier, ref)
                launcher = self.launchers.get(identifier)
                if launcher is not None:
                    self.loop.add_callback(launcher.notify_stop, data)
                    if data["exit_code"] is not None and identifier not in self._leaving:
                        # its actor lives: it has the log
                        self._fetch_output(ray, identifier, launcher)

    def _ended(self, ray: Any, identifier: str, ref: Any) -> dict[str, Any]:
        from ray.exceptions import RayActorError

        launcher = self.launchers[identifier]
        where = dict(launcher.where)
        data: dict[str, Any] = {
            "identifier": identifier,
            "pid": where.get("pid"),
            "host": where.get("host"),
            "node_id": where.get("node_id"),
        }
        try:
            code = ray.get(ref)
        except RayActorError as e:
            code = None
            data["reason"] = f"its Ray actor died: {actor_died(e)}"
        else:
            data["reason"] = f"its engine ended ({engine_exit(code)}) under its Ray actor"
        data["exit_code"] = code
        if identifier in self._leaving:
            data["reason"] = "stopped"
        return data

    def _fetch_output(self, ray: Any, identifier: str, launcher: Any) -> None:
        """The end of an ended engine's log, from its actor, after its end is told (a
        busy node's answer must not delay the news)."""
        try:
            launcher.output = ray.get(launcher.actor.output.remote(), timeout=OUTPUT_TIMEOUT_S)
        except Exception as e:  # the log is for messages only
            log.debug("output of %s: %s", launcher.actor_name, e)
            return
        self.outputs[identifier] = launcher.output
