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
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..cluster.kind import Cluster


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


@dataclass(frozen=True)
class Entry:
    kind: str  # "dist", "push" or "train"
    key: str  # what identifies the cell (or, for a push, the variable): a re-run replaces
    code: str
    seq: int
    count: int | None  # the cell's execution count, In [count]
    engines: Engines
    ranks: tuple[int, ...] | None = None  # None: every rank
    values: dict[str, Any] = field(default_factory=dict)  # push: {name: value}
    train_spec: Any = None  # train: the RunSpec
    run: Any = None  # train: the TrainingRun (its state, at export)


class History:
    """The entries of one IPython shell (one per shell, as the magics' Session)."""

    _by_shell: dict[int, History] = {}

    def __init__(self, shell: Any = None) -> None:
        self.shell = shell
        self.entries: list[Entry] = []
        self._seq = itertools.count()
        self._cell_id: str | None = None
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

    def _count(self) -> int | None:
        count = getattr(self.shell, "execution_count", None)
        return count if isinstance(count, int) else None

    def _add(self, kind: str, key: str, code: str, cluster: Cluster, **extra: Any) -> Entry:
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
        return entry

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
