"""Runs read back from the run store: ``load_run(name_or_id)``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

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

    def records(self) -> list[dict[str, Any]]:
        """Every record in arrival order: dicts with rank, step, time and the metrics."""
        out = self._reader.metrics(self.id)
        for rec in out:
            rec.pop("seq", None)
        return out

    def to_csv(self, path: str | Path) -> Path:
        records = self.records()
        fields = ["rank", "step", "time"]
        for rec in records:
            fields.extend(k for k in rec if k not in fields)
        path = Path(path)
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(records)
        return path

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
