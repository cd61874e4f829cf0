"""What the panel's REST API does, without HTTP: queries over the run store, cluster actions.

The Jupyter server is not the process that owns the clusters (the kernel is), so every
answer comes from the run store on disk, and an action reaches a cluster through the
ipyparallel cluster file recorded with it in the store, never through the process list.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import stat
import tempfile
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import privates
from ..cluster import facts, reap
from ..contracts import (
    ActionReply,
    ClusterAction,
    ClusterModel,
    DeleteReply,
    MetricsPage,
    PruneReply,
    RankModel,
    RunDetailModel,
    RunModel,
)
from ..export.stored import exports_of
from ..privatedir import UnsafeDirectoryError, check_private
from ..protocol import ACTIVE_RUN_STATES, LIVE_CLUSTER_STATES, ClusterState, RunRankState, RunState
from ..store import StoreError, StoreReader, StoreWriter, store_path
from ..store.control import ControlQueue
from ..store.reader import kernel_alive

if TYPE_CHECKING:
    from ipyparallel import Cluster

log = logging.getLogger("dist_notebook")
RUN_STATES = tuple(s.value for s in RunState)
# A cluster in one of these states has no processes left to signal.
# States in which the server finds nothing to interrupt and, without a cluster file,
# nothing to stop. Not protocol.ENDED_CLUSTER_STATES: an orphaned cluster (its kernel
# gone) may still have processes, which the server then acts on itself.
NOTHING_TO_ACT_ON = (ClusterState.STOPPED, ClusterState.FAILED)
# The owning kernel looks for requests every 0.2 s (cluster/owner.py); it has this long
# to take one, on a busy machine, before the server says it does not answer.
TAKE_S = 5.0
# A stop lets a cancelled run end (up to 30 s), then stops the cluster (~5 s).
DONE_S = 90.0
# Metrics records per answer: large enough for a whole short run in one poll, small enough
# to keep an answer under a few MB; the client asks again at once while `more` is true.
METRICS_LIMIT_DEFAULT = 5000
METRICS_LIMIT_MAX = 50000


class UnknownIdError(LookupError):
    """No cluster or run with this id in the run store."""


class InvalidParameterError(ValueError):
    """A query parameter is out of range or not one of the allowed values."""


class ClusterUnreachableError(RuntimeError):
    """The cluster's ipyparallel processes cannot be reached to act on them."""


class RunInProgressError(RuntimeError):
    """A run that is still going cannot be deleted."""


class ClusterActionError(RuntimeError):
    """Reaching the cluster worked, but the interrupt or stop itself failed."""


class RunStoreManager:
    """Answers the panel's questions from the run store and acts on clusters.

    *path* fixes the store file; without it the location is looked up on each call
    (``DIST_NOTEBOOK_STORE`` or the per-user default), so a store created after the
    server started is found. A store that does not exist yet holds no clusters and no
    runs: lists are empty and ids are unknown.
    """

    def __init__(self, path: Path | None = None) -> None:
        self._path = path

    @property
    def path(self) -> Path:
        return self._path or store_path()

    @contextlib.contextmanager
    def _reader(self) -> Iterator[StoreReader | None]:
        path = self.path
        if not path.exists():
            yield None
            return
        # One connection per call: opening SQLite costs microseconds, and a store that
        # was moved away or replaced is never read through a stale handle.
        reader = StoreReader(path)
        try:
            yield reader
        finally:
            reader.close()

    # queries ----------------------------------------------------------------
    def clusters(self) -> list[ClusterModel]:
        with self._reader() as reader:
            if reader is None:
                return []
            if reader.orphaned():
                self._settle_orphans()
            trusted = _store_is_ours(self.path)
            return [
                _public_cluster(c, _busy_ranks(reader, c), _read_only(c, self.path, trusted))
                for c in reader.clusters()
            ]

    def _settle_orphans(self) -> None:
        """Write down what reads already show: clusters of dead kernels, and their
        unfinished runs, are orphaned (each read marks them even if this fails)."""
        try:
            writer = StoreWriter(self.path)
            try:
                writer.close_orphans(lambda pid: kernel_alive(pid))
            finally:
                writer.close()
        except StoreError as e:
            log.warning("cannot mark orphaned clusters in the run store: %s", e)

    def cluster(self, cluster_id: str) -> ClusterModel:
        with self._reader() as reader:
            found = reader.cluster(cluster_id) if reader is not None else None
            if found is None or reader is None:
                raise UnknownIdError(f"no cluster with id {cluster_id!r}")
            return _public_cluster(found, _busy_ranks(reader, found), _read_only(found, self.path))

    def runs(self, cluster_id: str | None = None, state: str | None = None) -> list[RunModel]:
        if state is not None and state not in RUN_STATES:
            raise InvalidParameterError(
                f"state must be one of {', '.join(RUN_STATES)}, not {state!r}"
            )
        with self._reader() as reader:
            if reader is None:
                return []
            return [_public_run(r) for r in reader.runs(cluster_id=cluster_id, state=state)]

    def run(self, run_id: str) -> RunDetailModel:
        """The run's row, ranks, and ``exports``: where it was exported (TensorBoard,
        MLflow), each {"tool", "location", "url", "command", ...}, oldest first."""
        with self._reader() as reader:
            found = reader.run(run_id) if reader is not None else None
            exports = exports_of(reader.events(run_id=run_id)) if reader and found else []
        if found is None:
            raise UnknownIdError(f"no run with id {run_id!r}")
        return {
            **_public_run(found),
            "code": found["code"],
            "ranks": found["ranks"],
            "flags": found["flags"],
            "output": found["output"],
            "exports": exports,
        }

    def metrics(
        self, run_id: str, since: int = 0, limit: int = METRICS_LIMIT_DEFAULT
    ) -> MetricsPage:
        """Records of *run_id* with a sequence number above *since*, oldest first.

        ``last_seq`` is the number to pass as *since* next time (it equals *since* when
        nothing is new); ``more`` is true when *limit* cut the answer short.
        """
        if not 0 <= since < 2**63:
            raise InvalidParameterError(f"since must be between 0 and 2**63 - 1, not {since}")
        if not 1 <= limit <= METRICS_LIMIT_MAX:
            raise InvalidParameterError(
                f"limit must be between 1 and {METRICS_LIMIT_MAX}, not {limit}"
            )
        with self._reader() as reader:
            if reader is None or reader.run(run_id) is None:
                raise UnknownIdError(f"no run with id {run_id!r}")
            records = reader.metrics(run_id, since=since, limit=limit)
        last_seq = records[-1]["seq"] if records else since
        return {
            "run": run_id,
            "since": since,
            "last_seq": last_seq,
            "more": len(records) == limit,
            "records": records,
        }

    def summary(self, run_id: str) -> dict[str, Any]:
        """The run's derived measures (dist_notebook.protocol.RunSummary), computed from
        the store by the same code the dashboard uses, so the panel and the cell agree."""
        with self._reader() as reader:
            found = reader.summary(run_id) if reader is not None else None
        if found is None:
            raise UnknownIdError(f"no run with id {run_id!r}")
        return found.to_json()

    # deleting ---------------------------------------------------------------
    def delete_run(self, run_id: str) -> DeleteReply:
        """Delete a run that ended, with its records (as %dist_runs --delete does)."""
        run = self.run(run_id)
        if run["state"] in ("pending", "running"):
            raise RunInProgressError(
                f"run {run['name']!r} ({run_id}) is {run['state']}: stop it first (Interrupt"
                " or Stop its cluster), then delete it"
            )
        writer = StoreWriter(self.path)
        try:
            writer.delete_runs([run_id])
        finally:
            writer.close()
        return {"id": run_id, "deleted": True}

    def prune(self, before: Any) -> PruneReply:
        """Delete ended runs started before *before* (epoch seconds) and ended clusters
        left without runs (as %dist_runs --prune-before does)."""
        if isinstance(before, bool) or not isinstance(before, int | float) or before != before:
            raise InvalidParameterError(
                f"before must be a time in seconds since the epoch, not {before!r}"
            )
        writer = StoreWriter(self.path)
        try:
            runs, clusters = writer.prune(float(before))
        finally:
            writer.close()
        return {"runs": runs, "clusters": clusters}

    def _cluster_row(self, cluster_id: str) -> dict[str, Any]:
        with self._reader() as reader:
            found = reader.cluster(cluster_id) if reader is not None else None
        if found is None:
            raise UnknownIdError(f"no cluster with id {cluster_id!r}")
        return found

    # actions ----------------------------------------------------------------
    # While the kernel that owns a cluster lives, an action is a request that kernel
    # carries out (dist_notebook/store/control.py): panel Stop is %dist_cluster stop
    # there. Only when the owner is gone does the server act on the processes itself,
    # and the store then says so: the cluster is orphaned, then stopped.
    async def interrupt(self, cluster_id: str) -> ActionReply:
        """The owning kernel's interrupt (a training run is cancelled; otherwise the
        running cell raises KeyboardInterrupt); without an owner, SIGINT to every engine."""
        row = self._cluster_row(cluster_id)
        if row["state"] in NOTHING_TO_ACT_ON:
            raise ClusterUnreachableError(
                f"cluster {cluster_id!r} is {row['state']}: there is nothing to interrupt"
            )
        if _has_owner(row) and _store_is_ours(self.path):
            return await self._through_owner(row, "interrupt")
        self._refuse_read_only(row, "interrupt")
        await asyncio.to_thread(_act_in_thread, row, "interrupt")
        reply: ActionReply = {
            "id": cluster_id,
            "action": "interrupt",
            "state": row["state"],
            "via": "server",
        }
        return self._record(reply, row, stopped=False)

    async def stop(self, cluster_id: str) -> ActionReply:
        """Stop the cluster (idempotent): through its kernel, or, with the kernel gone,
        the engines and the controller directly."""
        row = self._cluster_row(cluster_id)
        if row["state"] in NOTHING_TO_ACT_ON and not _cluster_file(row).exists():
            return {"id": cluster_id, "action": "stop", "state": row["state"], "via": "none"}
        # A failed cluster's kernel still owns it (it may restart it): through it too.
        owned = _has_owner(row) and row["state"] not in ("stopped", "orphaned")
        if owned and _store_is_ours(self.path):
            return await self._through_owner(row, "stop")
        self._refuse_read_only(row, "stop")
        with self._reader() as reader:
            ranks = reader.ranks(cluster_id) if reader is not None else []
        await asyncio.to_thread(_act_in_thread, row, "stop", ranks)
        reply: ActionReply = {
            "id": cluster_id,
            "action": "stop",
            "state": "stopped",
            "via": "server",
        }
        return self._record(reply, row, stopped=True)

    async def _through_owner(self, row: dict[str, Any], action: ClusterAction) -> ActionReply:
        cluster_id = row["id"]
        queue = ControlQueue(self.path)
        try:
            seq = queue.request(cluster_id, action)
            answer = await _wait_for_answer(queue, seq)
        finally:
            queue.close()
        if answer is None:
            raise ClusterUnreachableError(
                f"the kernel that owns cluster {cluster_id!r} (pid {row['kernel_pid']}) did not"
                f" take the {action} within {TAKE_S:.0f} s: it may be busy outside Python;"
                " interrupt or restart that kernel from its notebook"
            )
        if answer["error"]:
            raise ClusterActionError(
                f"{action} of cluster {cluster_id!r} in its kernel failed: {answer['error']}"
            )
        state = self._cluster_row(cluster_id)["state"]
        return {
            "id": cluster_id,
            "action": action,
            "state": state,
            "via": "kernel",
            "result": answer["result"],
        }

    def _refuse_read_only(self, row: dict[str, Any], action: str) -> None:
        why = _read_only(row, self.path)
        if why is not None:
            raise ClusterUnreachableError(
                f"cluster {row['id']!r} is shown read-only, the server does not {action} it: {why}"
            )

    def _record(self, reply: ActionReply, row: dict[str, Any], stopped: bool) -> ActionReply:
        """Write what the server did to a cluster whose kernel is gone: the cluster and
        its unfinished runs are orphaned (the kernel's own view, if it comes back late,
        cannot overwrite that), then stopped, through the door a cluster's owner moves it
        by (``cluster.facts.from_row``, at the state the store says now). The action has
        happened either way: a store that cannot be written is a warning in the reply."""
        cluster_id = reply["id"]
        message = (
            f"{reply['action']} by the Jupyter server: the kernel that owned the cluster"
            f" (pid {row.get('kernel_pid')}) is gone"
        )
        try:
            writer = StoreWriter(self.path)
            try:
                writer.close_orphans(lambda pid: kernel_alive(pid))
                if stopped:
                    now = self._cluster_row(cluster_id)  # orphaned by now, if it was live
                    facts.from_row(now, lambda: writer).move(ClusterState.STOPPED)
                writer.add_event(reply["action"], message, cluster_id=cluster_id)
            finally:
                writer.close()
        except StoreError as e:
            reply["warning"] = str(e)
        return reply


def _has_owner(row: dict[str, Any]) -> bool:
    """Whether the kernel that started the cluster still runs (it can take a request)."""
    pid = row.get("kernel_pid")
    return bool(pid) and row["state"] != "orphaned" and kernel_alive(pid, row.get("started"))


async def _wait_for_answer(queue: ControlQueue, seq: int) -> dict[str, Any] | None:
    """The kernel's answer to request *seq*; None if no kernel took it within TAKE_S
    (the request is then withdrawn, so a kernel that wakes up later does not act)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        answer = queue.answer(seq)
        if answer["done"] is not None:
            return answer
        waited = loop.time() - started
        if answer["taken"] is None and waited > TAKE_S and queue.withdraw(seq):
            return None
        if waited > DONE_S:
            raise ClusterActionError(
                f"the kernel took the {answer['action']} of cluster {answer['cluster_id']!r}"
                f" but did not finish it within {DONE_S:.0f} s; see that kernel's notebook"
            )
        await asyncio.sleep(0.05)


def _launcher_config() -> Any:
    from traitlets.config import Config

    return Config({"LocalProcessLauncher": {"poll_seconds": 1}})


# A rank's part in a run still going that keeps it busy (a rank done or freed early is idle).
_BUSY_IN_RUN = (RunRankState.PENDING.value, RunRankState.RUNNING.value)


def _busy_ranks(reader: StoreReader, row: dict[str, Any]) -> set[int]:
    """The ranks of a live cluster that a run still going holds (pending or running in
    it). The store keeps each engine's own state, which says idle while the engine runs a
    cell; ``%dist_cluster status`` shows such a rank as busy, and so does the API."""
    if row["state"] not in LIVE_CLUSTER_STATES:
        return set()
    busy: set[int] = set()
    for run in reader.runs(cluster_id=row["id"]):
        if run["state"] in ACTIVE_RUN_STATES:
            detail = reader.run(run["id"]) or {"ranks": []}
            busy |= {r["rank"] for r in detail["ranks"] if r["state"] in _BUSY_IN_RUN}
    return busy


def _store_is_ours(path: Path) -> bool:
    """Whether the run store is a file of this user that nobody else can write, in a
    folder nobody else can write in: only then are the folders and pids it names ours."""
    try:
        info = os.lstat(path)
        check_private(path.parent)
    except (OSError, UnsafeDirectoryError):
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def _private_bases() -> list[Path]:
    """The folders this user's clusters' own profile folders are made in (and the folder
    above each that must be private too): cluster.own_profile_dir's two places."""
    fallback = Path(tempfile.gettempdir()) / f"dist-notebook-{os.getuid()}"
    return [store_path().parent / "ipython", fallback / "ipython"]


def _read_only(row: dict[str, Any], store: Path, trusted: bool | None = None) -> str | None:
    """Why the server must not act on *row*'s processes (None: it may): a store another
    user can write, or, for a cluster without a live kernel (the server would act on its
    processes itself), a profile folder outside this user's private bases, or a profile
    folder or cluster file that is not this user's own. Read-only clusters are shown."""
    if trusted is None:
        trusted = _store_is_ours(store)
    if not trusted:
        return (
            f"the run store {store} is not a private file of yours (another user could have"
            " written it): act on the cluster from the kernel that started it"
        )
    if _has_owner(row):
        return None  # its kernel acts on it (store/control.py), not the server
    profile = row.get("profile_dir") or ""
    if not profile:
        return None  # nothing to act on: the actions say so
    folder = Path(profile)
    try:
        base = next(b for b in _private_bases() if folder.parent == b)
        for path in (base.parent, base, folder):
            check_private(path)
        if not folder.name.startswith("cluster-"):
            raise UnsafeDirectoryError(f"{folder} is not a cluster's own profile folder")
        cluster_file = _cluster_file(row)
        if cluster_file.exists() or cluster_file.is_symlink():
            info = os.lstat(cluster_file)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
                raise UnsafeDirectoryError(f"{cluster_file} is not a file of yours")
    except StopIteration:
        return (
            f"its profile folder {folder} is not in your private folder of clusters "
            f"({_private_bases()[0]}): act on it from the kernel that started it"
        )
    except (OSError, UnsafeDirectoryError) as e:
        return f"{e}; act on it from the kernel that started it"
    return None


def _public_cluster(
    row: dict[str, Any], busy: AbstractSet[int] = frozenset(), read_only: str | None = None
) -> ClusterModel:
    """The cluster's row as the API shows it (profile_dir and ipp_cluster_id stay inside);
    ``read_only`` says why the panel's buttons do nothing for it (null: they act)."""
    return {
        "id": row["id"],
        "state": row["state"],
        "backend": row["backend"],
        "n": row["n"],
        "started": row["started"],
        "stopped": row["stopped"],
        "kernel_pid": row["kernel_pid"],
        "detached": row.get("detached"),
        "read_only": read_only,
        "ranks": [_public_rank(r, busy) for r in row.get("ranks", [])],
    }


def _public_rank(rank: dict[str, Any], busy: AbstractSet[int]) -> RankModel:
    state = "busy" if rank["rank"] in busy and rank["state"] == "idle" else rank["state"]
    return {
        "rank": rank["rank"],
        "host": rank["host"],
        "pid": rank["pid"],
        "device": rank["device"],
        "state": state,
        "engine_id": rank["engine_id"],
        "node_rank": rank["node_rank"],
    }


def _public_run(row: dict[str, Any]) -> RunModel:
    return {
        "id": row["id"],
        "name": row["name"],
        "cluster_id": row["cluster_id"],
        "state": row["state"],
        "started": row["started"],
        "ended": row["ended"],
        "steps": row["steps"],
        "error": row["error"],
    }


def _cluster_file(row: dict[str, Any]) -> Path:
    from ipyparallel import Cluster

    if not row.get("profile_dir"):
        return Path("/nonexistent")
    probe = Cluster(
        profile_dir=row["profile_dir"],
        cluster_id=row["ipp_cluster_id"] or "",
        shutdown_atexit=False,
    )
    return Path(probe.cluster_file)


def _act_in_thread(row: dict[str, Any], action: str, ranks: Sequence[dict[str, Any]] = ()) -> None:
    """Load the cluster from its file and act on it, in a worker thread with its own loop.

    ipyparallel's stop waits for processes with a blocking thread join, which must not
    stall the server's event loop.
    """
    asyncio.run(_act(row, action, ranks))


async def _act(row: dict[str, Any], action: str, ranks: Sequence[dict[str, Any]]) -> None:
    cluster = _load_cluster(row)
    try:
        if action == "interrupt":
            if not cluster.engines:
                raise ClusterUnreachableError(f"cluster {row['id']!r} has no running engines")
            await cluster.signal_engines(signal.SIGINT)
        else:
            await _stop(cluster, row, ranks)
    except ClusterUnreachableError:
        raise
    except Exception as e:  # a launcher's own error, of any type: report it, do not crash
        raise ClusterActionError(f"{action} of cluster {row['id']!r} failed: {e}") from e
    finally:
        _release_waiters(cluster)


async def _stop(cluster: Cluster, row: dict[str, Any], ranks: Sequence[dict[str, Any]]) -> None:
    """Stop a cluster whose kernel is gone as its kernel would (``DistCluster``'s
    teardown): ipyparallel's stop, then the rest of the process tree of its processes on
    this machine (the controller's schedulers, engines' children) and its files."""
    tree = reap.process_tree(_local_pids(cluster, row, ranks))
    await cluster.stop_cluster()
    left = reap.reap(tree, 2.0)
    if left:
        log.warning("processes of cluster %s could not be ended: %s", row["id"], left)
    reap.remove_files(reap.cluster_files(row["profile_dir"], cluster.cluster_id))


def _local_pids(
    cluster: Cluster, row: dict[str, Any], ranks: Sequence[dict[str, Any]]
) -> list[int]:
    """The pids of the cluster's processes on this machine that are still its own: the
    controller's (from the cluster file) and the ranks' recorded on this host, each
    created before the file's last write (a pid read back may belong to another process
    by now)."""
    from ipyparallel.cluster.launcher import LocalControllerLauncher

    pids = []
    controller = cluster.controller
    if isinstance(controller, LocalControllerLauncher) and controller.pid > 0:
        pids.append(controller.pid)
    here = {socket.gethostname(), "localhost"}
    pids += [r["pid"] for r in ranks if r.get("pid") and r.get("host") in here]
    written = _cluster_file(row).stat().st_mtime
    return reap.created_before(pids, written + 1.0)


def _load_cluster(row: dict[str, Any]) -> Cluster:
    """The ipyparallel cluster of *row*, rebuilt from its cluster file."""
    from ipyparallel import Cluster

    if not row.get("profile_dir"):
        raise ClusterUnreachableError(
            f"cluster {row['id']!r} cannot be reached: the run store names no ipyparallel"
            " profile for it"
        )
    cluster_file = _cluster_file(row)
    if not cluster_file.is_file():
        raise ClusterUnreachableError(
            f"cluster {row['id']!r} cannot be reached: no ipyparallel cluster file"
            f" {str(cluster_file)!r} (its kernel stopped it or exited)"
        )
    try:
        state = json.loads(cluster_file.read_text())
        return Cluster.from_dict(
            state,
            cluster_file=str(cluster_file),
            shutdown_atexit=False,
            config=_launcher_config(),
        )
    except Exception as e:  # the file is foreign input: bad JSON, classes that do not import
        raise ClusterUnreachableError(
            f"cluster {row['id']!r} cannot be reached: its cluster file {str(cluster_file)!r}"
            f" cannot be loaded ({type(e).__name__}: {e})"
        ) from e


def _release_waiters(cluster: Cluster) -> None:
    # Loading a cluster starts one thread per process that waits for its exit; after an
    # interrupt the processes live on, and those threads would outlive the request. They
    # check this event every poll_seconds (_launcher_config).
    pending = list(cluster.engines.values())
    if cluster.controller is not None:
        pending.append(cluster.controller)
    while pending:
        launcher = pending.pop()
        pending.extend(getattr(launcher, "launchers", {}).values())
        stop_waiting = privates.stop_waiting_event(launcher)
        if stop_waiting is not None:
            stop_waiting.set()


__all__ = [
    "ClusterActionError",
    "ClusterUnreachableError",
    "InvalidParameterError",
    "RunInProgressError",
    "RunStoreManager",
    "StoreError",
    "UnknownIdError",
]
