"""What the ranks ran in this kernel, in order: the cells ``%dist_export`` writes out.

The magics record here as they run (``%%dist`` once its cell succeeded on every rank it
was sent to, ``%dist_push`` once the values are on the ranks, ``%%dist_train`` once its
run is submitted); nothing else reads or changes what the ranks do. Each entry keeps the
cluster and the engine pids it ran on: a restart replaces the engines, and what they ran
before is gone from the ranks, so an export takes only the entries of the engines its
training ran on.

A cell is known by its id (the front end's cell id, from IPython's ``pre_run_cell``), so
a re-run cell replaces its earlier version; without an id (a plain IPython shell) by its
text.

On a detached cluster each entry is also kept with the cluster (its keeper, and a push's
value in the cluster's private folder: detached/kepthistory.py). A kernel that attaches
takes in what the kernels before it ran there (after the attach's cell, or before its
own first entry there), in their order and ahead of its own, so its export holds them.
"""

from __future__ import annotations

import itertools
import logging
import os
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..cluster.kind import Cluster

log = logging.getLogger("dist_notebook")


@dataclass(frozen=True)
class Engines:
    """The ranks an entry ran on: a cluster and its engines' pids (a restart changes them)."""

    cluster_id: str
    pids: tuple[int, ...]
    spec: Any  # the cluster's ClusterSpec
    backend: str
    devices: tuple[str, ...]

    @classmethod
    def of(cls, cluster: Cluster) -> Engines:
        ranks = sorted(getattr(cluster, "ranks", None) or [], key=lambda r: r.rank)
        return cls(
            cluster_id=str(getattr(cluster, "id", "")),
            pids=tuple(getattr(r, "pid", 0) for r in ranks),
            spec=getattr(cluster, "spec", None),
            backend=str(getattr(cluster, "backend", "") or ""),
            devices=tuple(str(getattr(r, "device", "cpu")) for r in ranks),
        )

    def to_json(self) -> dict[str, Any]:
        from ..detached.keeper import spec_to_json

        return {
            "cluster_id": self.cluster_id,
            "pids": list(self.pids),
            "spec": None if self.spec is None else spec_to_json(self.spec),
            "backend": self.backend,
            "devices": list(self.devices),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Engines:
        from ..detached.keeper import spec_from_json

        spec = data.get("spec")
        return cls(
            cluster_id=str(data["cluster_id"]),
            pids=tuple(int(p) for p in data["pids"]),
            spec=None if spec is None else spec_from_json(spec),
            backend=str(data.get("backend") or ""),
            devices=tuple(str(d) for d in data.get("devices") or ()),
        )


@dataclass(frozen=True)
class Entry:
    kind: str  # "dist", "push" or "train"
    key: str  # what identifies the cell (or, for a push, the variable): a re-run replaces
    code: str
    seq: int
    count: int | None  # the cell's execution count, In [count]
    engines: Engines
    ranks: tuple[int, ...] | None = None  # None: every rank
    values: Mapping[str, Any] = field(default_factory=dict)  # push: {name: value}
    train_spec: Any = None  # train: the RunSpec
    run: Any = None  # train: the TrainingRun (its state, at export)
    kernel: int | None = None  # the pid of the kernel that ran it, if not this one


class History:
    """The entries of one IPython shell (one per shell, as the magics' Session)."""

    _by_shell: dict[int, History] = {}

    def __init__(self, shell: Any = None) -> None:
        self.shell = shell
        self.entries: list[Entry] = []
        self._seq = itertools.count()
        self._cell_id: str | None = None
        self._synced: weakref.WeakSet[Any] = weakref.WeakSet()  # attached clusters taken in
        self._imported: set[tuple[str, int]] = set()  # (cluster id, keeper's seq)
        if shell is not None and hasattr(shell, "events"):
            shell.events.register("pre_run_cell", self._pre_run_cell)
            shell.events.register("post_run_cell", self._post_run_cell)

    @classmethod
    def for_shell(cls, shell: Any) -> History:
        key = id(shell)
        if key not in cls._by_shell:
            cls._by_shell[key] = cls(shell)
        return cls._by_shell[key]

    def _pre_run_cell(self, info: Any) -> None:
        self._cell_id = getattr(info, "cell_id", None)

    def _post_run_cell(self, result: Any) -> None:
        self._cell_id = None
        from .session import Session

        cluster = Session.for_shell(self.shell).cluster
        if cluster is not None and getattr(cluster, "detached", False):
            self._sync(cluster)

    def _sync(self, cluster: Any) -> None:
        """Take in what other kernels ran on the detached *cluster* (once per attach)."""
        from ..cluster.errors import ClusterError
        from ..protocol import ClusterState

        if cluster in self._synced or cluster.state != ClusterState.READY:
            return
        try:
            kept = cluster.kept_history()
        except ClusterError as e:  # gone: the next cell says so, in its own line
            log.debug("cluster %s: no kept history: %s", cluster.id, e)
            return
        self._synced.add(cluster)
        for data in kept:
            mark = (str(cluster.id), int(data["seq"]))
            if data.get("kernel") == os.getpid() or mark in self._imported:
                continue  # this kernel's own (in self.entries already), or taken in before
            self._imported.add(mark)
            self.entries.append(_from_kept(data, cluster.profile_dir, next(self._seq)))

    def _count(self) -> int | None:
        count = getattr(self.shell, "execution_count", None)
        return count if isinstance(count, int) else None

    def _add(self, kind: str, key: str, code: str, cluster: Cluster, **extra: Any) -> Entry:
        detached = getattr(cluster, "detached", False)
        if detached:
            self._sync(cluster)  # what the kernels before this one ran there comes first
        entry = Entry(
            kind=kind,
            key=key,
            code=code,
            seq=next(self._seq),
            count=self._count(),
            engines=Engines.of(cluster),
            **extra,
        )
        self.entries.append(entry)
        if detached:
            self._keep(cluster, entry)
        return entry

    def _keep(self, cluster: Any, entry: Entry) -> None:
        """Keep *entry* with the detached cluster, for the kernels that attach later."""
        from ..cluster.errors import ClusterError
        from ..privatedir import UnsafeDirectoryError

        data: dict[str, Any] = {
            "kind": entry.kind,
            "key": entry.key,
            "code": entry.code,
            "count": entry.count,
            "ranks": None if entry.ranks is None else list(entry.ranks),
            "engines": entry.engines.to_json(),
        }
        if entry.kind == "train":
            data["train_spec"] = asdict(entry.train_spec)
            data["run"] = {"id": entry.run.id, "name": entry.run.name}
        try:
            cluster.keep_history(data, entry.values)
        except (ClusterError, OSError, UnsafeDirectoryError) as e:
            # The cell ran; only a later kernel's %dist_export will lack it.
            log.warning("cluster %s: %s not kept for later kernels: %s", cluster.id, entry.kind, e)

    def _cell_key(self, kind: str, code: str) -> str:
        return f"{kind}:id:{self._cell_id}" if self._cell_id else f"{kind}:text:{code}"

    def ran_dist(self, cluster: Cluster, code: str, ranks: list[int] | None) -> None:
        """A ``%%dist`` cell succeeded on *ranks* (None: every rank)."""
        self._add(
            "dist",
            self._cell_key("dist", code),
            code,
            cluster,
            ranks=None if ranks is None else tuple(ranks),
        )

    def pushed(self, cluster: Cluster, values: dict[str, Any]) -> None:
        """``%dist_push`` bound *values* on every rank (kept by reference: the value the
        kernel holds now, which is what the ranks got unless it was changed in place)."""
        for name, value in values.items():
            self._add("push", f"push:{name}", name, cluster, values={name: value})

    def ran_train(self, cluster: Cluster, spec: Any, run: Any) -> None:
        """A ``%%dist_train`` run of *spec* (a RunSpec) was submitted (its state is read
        at export)."""
        code, ranks = spec.code, spec.ranks
        self._add(
            "train",
            self._cell_key("train", code),
            code,
            cluster,
            ranks=None if ranks is None else tuple(ranks),
            train_spec=spec,
            run=run,
        )

    def last_train(self) -> Entry | None:
        return next((e for e in reversed(self.entries) if e.kind == "train"), None)


def history_of(shell: Any) -> History:
    return History.for_shell(shell)


class KeptValues(Mapping[str, Any]):
    """A kept push's value, loaded from the cluster's private folder when the export
    needs it (ExportError, naming the fix, when it cannot be)."""

    def __init__(self, profile_dir: str, kept: dict[str, Any]) -> None:
        self.profile_dir = profile_dir
        self.kept = kept

    def __getitem__(self, name: str) -> Any:
        from ..batch.script import ExportError
        from ..detached.kepthistory import KeptValueError, load_value

        try:
            return load_value(self.profile_dir, self.kept[name])
        except KeptValueError as e:
            raise ExportError(
                f"the value {name!r} an earlier kernel pushed cannot be loaded ({e}): push it"
                " again from this kernel (or make it on the ranks in a %%dist cell), then"
                " export again"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.kept)

    def __len__(self) -> int:
        return len(self.kept)


@dataclass(frozen=True)
class StoredRun:
    """A kept training's run as the export reads it: its name, id and state (the store's)."""

    id: str
    name: str

    @property
    def state(self) -> Any:
        from ..protocol import RunState
        from ..store import StoreError, StoreReader

        try:
            reader = StoreReader()
            try:
                row = reader.run(self.id)
            finally:
                reader.close()
        except StoreError as e:
            log.debug("run %s: %s", self.id, e)
            return None
        state = None if row is None else row.get("state")
        return RunState(state) if state in RunState._value2member_map_ else None


def _from_kept(data: dict[str, Any], profile_dir: str, seq: int) -> Entry:
    """An Entry from the keeper's JSON (detached/kepthistory.py)."""
    from ..training.run import RunSpec

    kind = str(data["kind"])
    ranks = data.get("ranks")
    spec, run = None, None
    if kind == "train":
        given = dict(data["train_spec"])
        if given.get("ranks") is not None:
            given["ranks"] = tuple(given["ranks"])
        spec = RunSpec(**given)
        run = StoredRun(str(data["run"]["id"]), str(data["run"]["name"]))
    values: Mapping[str, Any] = {}
    if kind == "push":
        values = KeptValues(profile_dir, dict(data.get("values") or {}))
    kernel = data.get("kernel")
    return Entry(
        kind=kind,
        key=str(data["key"]),
        code=str(data["code"]),
        seq=seq,
        count=data.get("count"),
        engines=Engines.from_json(data["engines"]),
        ranks=None if ranks is None else tuple(ranks),
        values=values,
        train_spec=spec,
        run=run,
        kernel=kernel if isinstance(kernel, int) else None,
    )
