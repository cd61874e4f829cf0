"""A kernel's view of a detached cluster: what the magics hold as their cluster.

Its processes are another's: the keeper (detached/keeper.py)
started them and holds them. Cells go to the engines through this kernel's own
ipyparallel client (the engines, and every variable on them, are the keeper's and
outlive this kernel); stop, restart, a training run and the list of dead ranks are asked
of the keeper over the signed link (detached/link.py). The keeper writes the cluster's
state in the run store (one writer); this object only mirrors it, refreshed from the
keeper before each cell, so a takeover by another kernel or the keeper's end is said at
the next cell, in one line.

    cluster = start_detached(spec, idle_timeout=1800, progress=print)
    cluster = attach("3f2a9c1b")          # from any kernel of the same user
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ipyparallel as ipp

from .. import envvars
from ..cluster import limits
from ..cluster.errors import ClusterError, ScaleError
from ..cluster.facts import ClusterFacts, RankInfo
from ..cluster.ippengines import Engines
from ..cluster.spec import ClusterSpec
from ..cluster.view import ClusterView
from ..protocol import ClusterState
from ..store.reader import kernel_alive
from .keeper import spec_from_json, spec_to_json
from .kepthistory import keep_values
from .keptrun import KeptRun
from .link import FILE, KeeperError, KeeperGone, KeeperLink, keeper_files

log = logging.getLogger("dist_notebook")
CLIENT_WAIT_S = 30.0  # for this kernel's client to see every engine of the cluster
LONG_S = 600.0  # a stop or restart request may take this long
# The keeper's environment: nothing that would tie it to this kernel.
NOT_INHERITED = (envvars.PARENT_PID, envvars.WARM)
_attached: weakref.WeakSet[AttachedCluster] = weakref.WeakSet()


def _quiet(_: str) -> None:
    """The default progress sink: say nothing."""


def profiles_base() -> Path:
    """The folder of the clusters' own profile folders (cluster.own_profile_dir)."""
    from ..store import store_path

    return store_path().parent / "ipython"


def check_writable() -> None:
    """Refuse a detached start where its files cannot be written: the keeper's file (how
    ``list`` and ``attach`` find it, beside the run store) and the run store (where its
    runs' records and output are kept for the kernel that attaches)."""
    from ..store import store_path

    store = store_path()
    folder = store.parent
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".dn-probe-")
        os.close(fd)
        os.unlink(probe)
        if store.exists() and not os.access(store, os.W_OK):
            raise PermissionError(f"{store} is read-only")
    except OSError as e:
        why = e.strerror or str(e)
        raise ClusterError(
            f"%dist_cluster start --detach: {folder} cannot be written ({why}), and a detached"
            " cluster keeps its keeper file and its runs' records beside the run store: set "
            f"{envvars.STORE} to a file in a folder you can write, or start without --detach"
        ) from None


def start_detached(
    spec: ClusterSpec, idle_timeout: float | None, progress: Any = print
) -> AttachedCluster:
    """Start a keeper for a cluster of *spec* and attach this kernel to it."""
    idle_timeout = limits.check_idle_timeout(idle_timeout)
    check_writable()
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    keeper = subprocess.Popen(
        [sys.executable, "-m", "dist_notebook.detached.keeper"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # a signal to the kernel's group is not the keeper's
        text=True,
    )
    assert keeper.stdin is not None and keeper.stdout is not None
    keeper.stdin.write(json.dumps({"spec": spec_to_json(spec), "idle_timeout": idle_timeout}))
    keeper.stdin.write("\n")
    keeper.stdin.close()
    ready: dict[str, Any] | None = None
    for line in keeper.stdout:  # the keeper's start is bounded by the spec's start timeout
        message = json.loads(line)
        if "progress" in message:
            progress(message["progress"])
        elif "error" in message:
            keeper.wait(timeout=30)
            raise ClusterError(message["error"])
        elif "ready" in message:
            ready = message["ready"]
            break
    keeper.stdout.close()
    if ready is None:
        code = keeper.wait(timeout=30)
        raise ClusterError(f"the cluster's keeper ended while starting (exit code {code})")
    return AttachedCluster.attach_file(Path(ready["file"]), force=False)


def find_keeper(cluster_id: str | None) -> Path:
    """The keeper file of cluster *cluster_id* (a prefix will do), or of the newest
    detached cluster if None; ClusterError naming the fix if there is none."""
    try:
        files = keeper_files(profiles_base())
    except KeeperError as e:
        raise ClusterError(str(e)) from None
    if cluster_id is None:
        if not files:
            raise ClusterError(
                "no detached cluster to attach to: start one with %dist_cluster start --detach"
            )
        return files[0]
    found = [f for f in files if f.parent.name.removeprefix("cluster-").startswith(cluster_id)]
    if len(found) == 1:
        return found[0]
    known = ", ".join(f.parent.name.removeprefix("cluster-") for f in files) or "none"
    if not found:
        raise ClusterError(
            f"no detached cluster {cluster_id}: %dist_cluster list shows them (now: {known})"
        )
    raise ClusterError(f"{cluster_id} names more than one detached cluster: {known}")


def list_detached() -> list[dict[str, Any]]:
    """Every detached cluster of this user, as its keeper says (or as not answering)."""
    rows = []
    try:
        paths = keeper_files(profiles_base())
    except KeeperError as e:
        raise ClusterError(str(e)) from None
    for path in paths:
        try:
            link = KeeperLink.load(path)
            info = link.request("info", timeout=3)
        except KeeperError as e:
            rows.append({"id": path.parent.name.removeprefix("cluster-"), "error": str(e)})
            continue
        info["started"] = link.file.started
        rows.append(info)
    return rows


class KeeperOwner:
    """The owner interface of the magics (cluster/owner.py), for a detached cluster:
    the keeper's own owner acts; this kernel asks it."""

    def __init__(self, cluster: AttachedCluster) -> None:
        self.cluster = cluster
        self.run: Any = None

    def active_run(self) -> Any:
        run = self.run
        if run is not None and run.state.value in ("pending", "running"):
            return run
        return None

    def interrupt(self) -> str:
        return str(self.cluster.ask("interrupt"))

    def stop(self, reason: str = "%dist_cluster stop") -> str:
        self.cluster.stop_sync()
        return "stopped"

    def refuse_during_run(self, doing: str) -> None:
        run = self.active_run()
        if run is not None:
            raise ClusterError(
                f"{doing} while run {run.name} trains in the background on these ranks: "
                "wait until it ends (%dist_runs shows it), or stop it, then try again"
            )

    def stopping(self) -> bool:
        return self.cluster.state == ClusterState.STOPPING

    def wait_for_stop(self, timeout: float) -> None:
        """A stop of a detached cluster is done when its request returns."""

    def watch(self) -> None:
        """The keeper's owner takes the panel's requests."""


class AttachedCluster(ClusterView):
    """A detached cluster, as the kernel attached to it sees it: the keeper's facts
    mirrored here (its ``ClusterFacts``, written by nobody in this kernel), this kernel's
    own ipyparallel client of the keeper's engines (its ``Engines``), and the link that
    asks the keeper for everything that changes the cluster."""

    detached = True

    def __init__(self, link: KeeperLink, info: dict[str, Any]) -> None:
        spec = spec_from_json(info["spec"])
        self.id = info["id"]
        self.backend = spec.resolved_backend
        self.facts = ClusterFacts(self.id, spec, self.writer, self.backend)
        self.progress: Callable[[str], None] = _quiet
        self.engines = Engines(self.id, lambda: self.spec, self.progress)
        self.engines.client = ipp.Client(link.file.client_file)
        self.link = link
        self.owner = KeeperOwner(self)
        self.keeper_pid: int | None = int(info["keeper"])
        self.idle_timeout: float | None = info.get("idle_timeout")
        self._generation = 0
        self._apply(info)
        self._wait_for_client()
        _attached.add(self)
        _register_release()

    @classmethod
    def attach_file(cls, path: Path, force: bool = False) -> AttachedCluster:
        link = KeeperLink.load(path)
        try:
            info = link.request("attach", kernel=os.getpid(), force=force)
        except KeeperError as e:
            raise ClusterError(str(e)) from None
        cluster = cls(link, info)
        if info.get("run"):
            run = info["run"]
            cluster.owner.run = KeptRun(cluster, run["id"], run["name"], run["ranks"])
        return cluster

    @property
    def profile_dir(self) -> str:
        return self.link.file.profile_dir

    # --- the keeper's answers ------------------------------------------------------
    def ask(self, op: str, timeout: float = 10.0, **args: Any) -> Any:
        """The keeper's answer for this kernel; ClusterError (one line) if it refused
        or is gone (then this cluster is stopped here too)."""
        try:
            if not kernel_alive(self.keeper_pid, self.link.file.started):
                raise KeeperGone(f"its keeper, pid {self.keeper_pid}, has ended")
            return self.link.request(op, timeout=timeout, kernel=os.getpid(), **args)
        except KeeperGone as e:
            self._gone(str(e))
            raise ClusterError(
                f"cluster {self.id} is gone ({e}): it was stopped, reached its idle timeout, "
                "or its keeper was killed; start a new one with %dist_cluster start"
            ) from None
        except KeeperError as e:
            raise ClusterError(str(e)) from None

    def _gone(self, why: str) -> None:
        self.facts.mirror(ClusterState.STOPPED, self.ranks, None)
        if self.client is not None:
            self.client.close()
            self.engines.client = None

    def _apply(self, info: dict[str, Any]) -> None:
        self.facts.mirror(
            ClusterState(info["state"]),
            [RankInfo(**r) for r in info["ranks"]],
            info.get("failure"),
        )
        self.master_addr = info.get("master_addr")
        self.pair_ports = list(info.get("pair_ports") or [])
        self.stack_dir = info.get("stack_dir") or ""
        self.start_seconds = info.get("start_seconds")
        self.ready_since = info.get("ready_since")

    def refresh(self) -> dict[str, Any]:
        info = self.ask("info")
        self._apply(info)
        return info

    def _wait_for_client(self) -> None:
        assert self.client is not None
        wanted = {r.engine_id for r in self.ranks}
        deadline = time.monotonic() + CLIENT_WAIT_S
        while not wanted <= set(self.client.ids):
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"this kernel's client sees engines {sorted(self.client.ids)} of cluster "
                    f"{self.id}, not {sorted(wanted)}: try %dist_cluster attach again"
                )
            time.sleep(0.05)

    # --- what the magics call ------------------------------------------------------
    def require_ready(self) -> ipp.Client:
        if self.state != ClusterState.STOPPED:
            self.refresh()
        return super().require_ready()

    def writer(self) -> None:
        """None: the keeper is this cluster's one writer of the store (it moves the
        cluster along the protocol there); this kernel only mirrors its facts."""
        return None

    def start_sync(self) -> AttachedCluster:
        raise ClusterError(
            f"cluster {self.id} is detached and already started: %dist_cluster restart, "
            "or stop it and start a new one"
        )

    def restart_sync(self, everything: bool = False) -> AttachedCluster:
        self._apply(self.ask("restart", timeout=LONG_S, everything=everything))
        self._wait_for_client()
        return self

    def scale_sync(self, n: int, hosts: str | None = None) -> float:
        raise ScaleError(
            f"cluster {self.id}: a detached cluster keeps its size: stop it and start one "
            f"with -n {n} --detach"
        )

    def stop_sync(self) -> None:
        if self.state in (ClusterState.NEW, ClusterState.STOPPED):
            return
        self.facts.mirror(ClusterState.STOPPING, self.ranks, self.failure)  # as asked
        try:
            self.ask("stop", timeout=LONG_S)
        finally:
            self._gone("stopped")

    def dead_ranks(self) -> dict[int, str]:
        if self.state == ClusterState.STOPPED:
            return {}
        return {int(r): why for r, why in self.ask("dead_ranks").items()}

    def mark_dead(self, ranks: dict[int, str]) -> None:
        """Nothing to record here: the keeper's health watch marks them in its facts,
        which the next refresh mirrors."""

    def local_pids(self) -> list[int]:
        return []  # the keeper's, not this kernel's

    def stop_run(self, run_id: str) -> None:
        self.ask("stop_run", run_id=run_id)

    def keeper_run(self, spec: Any) -> KeptRun:
        """The keeper runs it, so that it goes on without this kernel; followed here."""
        return self.start_run(spec)

    def start_run(self, spec: Any) -> KeptRun:
        """Ask the keeper to run *spec* (a RunSpec); the run, to follow from the store."""
        from dataclasses import asdict

        started = self.ask("run", spec=asdict(spec))
        run = KeptRun(self, started["id"], started["name"], started["ranks"])
        self.owner.run = run
        return run

    def keep_history(self, entry: dict[str, Any], values: dict[str, Any] | None = None) -> None:
        """Keep what this kernel ran on the ranks (*entry*, JSON; a push's *values* are
        pickled into the cluster's private folder) with the keeper, for the kernels that
        attach later (detached/kepthistory.py)."""
        if values:
            entry = keep_values(self.profile_dir, entry, values)
        self.ask("keep", entry=entry)

    def kept_history(self) -> list[dict[str, Any]]:
        """What every kernel ran on this cluster's ranks, in order (keep_history's)."""
        return list(self.ask("history"))

    def detach(self) -> None:
        """Let go of the cluster: it goes on (its idle timeout counts from now)."""
        try:
            self.link.request("release", timeout=3, kernel=os.getpid())
        except KeeperError as e:  # gone already: nothing to let go of
            log.debug("detach of %s: %s", self.id, e)
        self._gone("detached")
        _attached.discard(self)

    def __repr__(self) -> str:
        return f"<AttachedCluster {self.id} {self.state.value} n={self.n} keeper={self.keeper_pid}>"


_release_registered = False


def _register_release() -> None:
    """At this kernel's exit its clusters are let go of, never stopped."""
    global _release_registered
    if not _release_registered:
        atexit.register(_release_all)
        _release_registered = True


def _release_all() -> None:
    for cluster in list(_attached):
        if cluster.state != ClusterState.STOPPED:
            cluster.detach()


__all__ = ["FILE", "AttachedCluster", "find_keeper", "list_detached", "start_detached"]
