"""What every exporter shares: the run it exports, its optional packages, its interface."""

from __future__ import annotations

import importlib
import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Protocol

from ..protocol import Record

# The extra that installs each exporter, and the modules it needs.
EXTRAS: dict[str, tuple[str, ...]] = {
    "tensorboard": ("tensorboard", "google_crc32c"),
    "mlflow": ("mlflow",),
}
# The record's own fields, exported beside the user's metrics under this prefix.
SYSTEM_TAGS = (("step_time", "system/step_time"), ("comm_time", "system/comm_time"))
SAMPLES_TAG = "system/samples"

Location = dict[str, Any]


class ExportUnavailable(ImportError):
    """An exporter's packages are not installed; the message names the extra to install."""


def require(tool: str, what: str) -> None:
    """Raise ExportUnavailable naming the extra unless *tool*'s packages can be imported."""
    importlib.invalidate_caches()  # a package installed since the kernel started counts
    missing = [m for m in EXTRAS[tool] if importlib.util.find_spec(m) is None]
    if missing:
        raise ExportUnavailable(
            f"{what} needs the {tool} extra ({', '.join(missing)} is not installed): "
            f"pip install 'dist-notebook[{tool}]'"
        )


@dataclass(frozen=True)
class RunInfo:
    """A run as an exporter describes it: who it is and how it was started."""

    run_id: str
    name: str
    code: str = ""
    flags: dict[str, Any] = field(default_factory=dict)
    ranks: tuple[int, ...] = ()
    world_size: int | None = None
    backend: str | None = None
    cluster_id: str | None = None
    started: float = 0.0

    def params(self) -> dict[str, str]:
        """Flags and the cluster's facts as text, in a stable order (MLflow params)."""
        out = {k: _text(v) for k, v in self.flags.items()}
        out.update(
            world_size=_text(self.world_size),
            backend=_text(self.backend),
            ranks=",".join(map(str, self.ranks)),
            cluster_id=_text(self.cluster_id),
        )
        return out


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return "" if value is None else str(value)


def flags_of(spec: Any) -> dict[str, Any]:
    """A run spec's options (every dataclass field but the code and the command as
    typed), JSON-ready."""
    if not is_dataclass(spec):
        raise TypeError(f"flags_of() needs a dataclass, not {type(spec).__name__}")
    out = {}
    for f in fields(spec):
        if f.name not in ("code", "command"):
            value = getattr(spec, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def flags_json(spec: Any) -> str:
    return json.dumps(flags_of(spec))


def record_values(rec: Record) -> list[tuple[str, float]]:
    """The values one record exports: the user's metrics, then the system's fields."""
    values = list(rec.metrics.items())
    for attr, tag in SYSTEM_TAGS:
        value = getattr(rec, attr)
        if value is not None:
            values.append((tag, value))
    if rec.samples is not None:
        values.append((SAMPLES_TAG, rec.samples))
    if rec.gpu:  # a GPU rank's sampled utilisation, memory and power
        values.extend((f"system/gpu_{k}", v) for k, v in rec.gpu.items())
    return values


class StepCounter:
    """The x-axis step of each record: its own step, or (when it reported none) the
    number of records its rank sent before it."""

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}

    def __call__(self, rec: Record) -> int:
        index = self._seen.get(rec.rank, 0)
        self._seen[rec.rank] = index + 1
        return rec.step if rec.step is not None else index


class Target(Protocol):
    """Where an exporter writes; its methods run on the exporter's own thread."""

    tool: str

    def start(self) -> Location:
        """Create the destination; return where it is (kept in the run store)."""

    def write(self, records: list[Record]) -> None: ...

    def flush(self) -> None: ...

    def finish(self, state: str, error: str | None) -> None:
        """Record the run's final state, then release everything."""

    def abort(self) -> None:
        """Release everything after a failure; never raises."""

    def describe(self) -> str:
        """What this is, for messages: 'TensorBoard export to DIR'."""

    def again(self) -> str:
        """The call that exports the stored run again, for messages."""


LocationCallback = Callable[[Location], None]
