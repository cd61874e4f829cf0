"""Runs read back from the run store: ``load_run(name_or_id)``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ..protocol import SYSTEM_FIELDS, RankSummary, Record, RunSummary
from ..store import StoreReader


class Run:
    """A run as stored: its state, ranks and every metric record."""

    def __init__(self, row: dict[str, Any], reader: StoreReader) -> None:
        self._row = row
        self._reader = reader
        self.id: str = row["id"]
        self.name: str = row["name"]
        self.started: float = row["started"]
        self.ended: float | None = row["ended"]
        self.rank_states: dict[int, str] = {r["rank"]: r["state"] for r in row["ranks"]}

    @property
    def state(self) -> str:
        row = self._reader.run(self.id)
        return row["state"] if row else self._row["state"]

    def records(self) -> list[Record]:
        """Every record in arrival order (``dist_notebook.protocol.Record``: rank, step,
        time, step_time, comm_time, samples, and your metrics under ``.metrics``)."""
        return self._reader.records(self.id)

    def summary(self) -> RunSummary:
        """The run's measures, as the dashboard and the panel show them, and its verdict:
        ``.verdict``, why its steps are slow in one line ("healthy", "rank 1 is starved:
        ...", "rank 3 does 2.1x the work of the median rank: ...": dist_notebook/verdict.py)."""
        found = self._reader.summary(self.id)
        if found is None:
            raise KeyError(f"run {self.id!r} is no longer in the run store")
        return found

    def summaries(self) -> list[RankSummary]:
        """Per rank: samples/s, step time, comm time and share, time outside the gradient
        all-reduce, how long the other ranks wait for it, straggler."""
        return self.summary().ranks

    def to_csv(self, path: str | Path) -> Path:
        """One row per record: the system's fields, then your metrics (a metric whose
        name is also a system field's is written as ``metric:<name>``)."""
        records = self.records()
        names: dict[str, None] = {}
        for rec in records:
            names.update(dict.fromkeys(rec.metrics))
        column = {n: (f"metric:{n}" if n in SYSTEM_FIELDS else n) for n in names}
        path = Path(path)
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow([*SYSTEM_FIELDS, *column.values()])
            for rec in records:
                writer.writerow(
                    [getattr(rec, k) for k in SYSTEM_FIELDS]
                    + [rec.metrics.get(n, "") for n in names]
                )
        return path

    def to_tensorboard(self, directory: str | Path) -> Path:
        """Write every record as TensorBoard event files under *directory* (one sub-run
        per rank, as ``%%dist_train --tensorboard`` does); return the run's directory.
        Needs ``pip install 'dist-notebook[tensorboard]'``."""
        from ..export import export_stored

        return Path(export_stored(self._reader.path, self.id, "tensorboard", directory)["location"])

    def to_mlflow(self) -> str:
        """Log the run to MLflow (``MLFLOW_TRACKING_URI``, else ./mlruns) as ``--mlflow``
        does; return the MLflow run id. Needs ``pip install 'dist-notebook[mlflow]'``."""
        from ..export import export_stored

        return str(export_stored(self._reader.path, self.id, "mlflow")["run_id"])

    def __repr__(self) -> str:
        return f"<Run {self.name} ({self.id}) {self.state}>"


def load_run(name_or_id: str, path: str | Path | None = None) -> Run:
    """The run with this id, or the latest run with this name."""
    reader = StoreReader(Path(path) if path else None)
    row = reader.find_run(name_or_id)
    if row is None:
        raise KeyError(f"no run named or numbered {name_or_id!r} in {reader.path}; see %dist_runs")
    return Run(row, reader)


def list_runs(path: str | Path | None = None) -> list[dict[str, Any]]:
    return StoreReader(Path(path) if path else None).runs()
