"""Export a run from the run store after the fact: ``load_run(...).to_tensorboard(DIR)``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ..contracts import ExportModel
from ..store import StoreError, StoreReader, StoreWriter
from .base import Location, RunInfo, Target, require

log = logging.getLogger("dist_notebook")
CHUNK = 10_000  # records per write: the same code path as a live run's batches
FLAGS_EVENT = "flags"  # the run's options, kept in the store's events when it starts
EXPORT_EVENT = "export"  # where a run was exported (the panel links to it)


def run_info(reader: StoreReader, run_id: str) -> RunInfo:
    """Everything an exporter says about a stored run."""
    row = reader.run(run_id)
    if row is None:
        raise KeyError(f"run {run_id!r} is no longer in the run store at {reader.path}")
    cluster = reader.cluster(row["cluster_id"]) or {}
    flags: dict[str, Any] = {"name": row["name"], "steps": row["steps"]}
    for event in reader.events(run_id=run_id):
        if event["kind"] == FLAGS_EVENT:
            flags = json.loads(event["message"])
    return RunInfo(
        run_id=run_id,
        name=row["name"],
        code=row.get("code") or "",
        flags=flags,
        ranks=tuple(r["rank"] for r in row["ranks"]),
        world_size=cluster.get("n"),
        backend=cluster.get("backend"),
        cluster_id=row["cluster_id"],
        started=row["started"],
    )


def export_stored(
    path: Path, run_id: str, tool: str, directory: str | Path | None = None
) -> Location:
    """Export every record of stored run *run_id* to *tool*; return where it went.

    Raises (unlike a live export, which only warns): the user asked for this export.
    """
    require(tool, f"to_{tool}()")
    reader = StoreReader(path)
    try:
        info = run_info(reader, run_id)
        row = reader.run(run_id) or {}
        records = reader.records(run_id)
    finally:
        reader.close()
    target: Target
    if tool == "tensorboard":
        from .tensorboard import TensorBoardTarget

        if directory is None:
            raise TypeError("to_tensorboard() needs a directory")
        target = TensorBoardTarget(info, directory, fresh=True)
    else:
        from .mlflow import MlflowTarget

        target = MlflowTarget(info)
    location = target.start()
    try:
        for i in range(0, len(records), CHUNK):
            target.write(records[i : i + CHUNK])
        target.finish(row.get("state") or "unknown", row.get("error"))
    except BaseException:
        target.abort()
        raise
    remember(path, run_id, location)
    return location


def remember(path: Path, run_id: str, location: Location) -> None:
    """Keep *location* with the run in the store (best effort: the export is done)."""
    try:
        writer = StoreWriter(path)
        try:
            writer.add_event(EXPORT_EVENT, json.dumps(location), run_id=run_id)
        finally:
            writer.close()
    except StoreError as e:
        log.warning("the export is done, but the run store cannot record where: %s", e)


def exports_of(events: list[dict[str, Any]]) -> list[ExportModel]:
    """The export locations among a run's events, oldest first (GET runs/<id>'s
    ``exports``)."""
    out: list[ExportModel] = []
    for event in events:
        if event["kind"] == EXPORT_EVENT:
            try:
                out.append(json.loads(event["message"]))
            except ValueError:
                log.debug("an export event that is not JSON: %r", event["message"])
    return out
