"""A run in MLflow: a parent run with the flags, one nested run per rank with its metrics.

Where: ``MLFLOW_TRACKING_URI`` (MLflow's own variable: a server, a database or a
directory), else ``./mlruns`` in the kernel's working directory. MLflow 3 keeps its
file store in maintenance mode behind ``MLFLOW_ALLOW_FILE_STORE``; for a ``file:`` URI we
set that variable to true unless the user set it, so the default works out of the box
(it also lets ``MlflowClient`` in the notebook read the runs back). Which experiment:
``MLFLOW_EXPERIMENT_NAME`` or ``MLFLOW_EXPERIMENT_ID``, else ``dist-notebook``.

The parent run (named as our run) holds the params (flags, world size, backend, ranks),
the code as its description, and the final state as its status and the tag
``dist_notebook.state``. Each rank is a child run (``digits/rank0``) holding that rank's
metrics by step: MLflow's chart view draws one chart per metric with one line per run,
so the ranks overlay as they do in TensorBoard's sub-runs.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..protocol import Record
from .base import Location, RunInfo, StepCounter, record_values

DEFAULT_EXPERIMENT = "dist-notebook"
BATCH = 1000  # MLflow's limit of metrics per log_batch
NOTE_LIMIT = 7000  # below MLflow's 8000-character limit of a tag's value
STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}
UNREACHABLE_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, else ./mlruns of the current directory (resolved now)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return (Path.cwd() / "mlruns").as_uri()


def metric_key(name: str) -> str:
    """*name* as an MLflow metric key: only letters, digits, _ - . / and spaces, and a
    normalised relative path (MLflow refuses anything else)."""
    key = re.sub(r"[^\w./ -]", "_", name)
    if not key or posixpath.normpath(key) != key or key.startswith(("/", ".")):
        key = "_" + key.replace("/", "_").replace(".", "_")
    return key


class MlflowTarget:
    tool = "mlflow"

    def __init__(self, info: RunInfo, uri: str | None = None) -> None:
        self.info = info
        self.uri = uri or tracking_uri()
        if self.uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        else:
            # MLflow retries an unreachable server 7 times with a doubling backoff: ~60 s
            # added to every run's end. An export says it failed after a few seconds
            # instead (a value the user set is kept).
            for name, value in UNREACHABLE_DEFAULTS.items():
                os.environ.setdefault(name, value)
        self.client: Any = None
        self.parent_id: str | None = None
        self.rank_runs: dict[int, str] = {}
        self._step = StepCounter()

    def describe(self) -> str:
        return f"MLflow export to {self.uri}"

    def again(self) -> str:
        return f"load_run({self.info.run_id!r}).to_mlflow()"

    def start(self) -> Location:
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        self.client = client = MlflowClient(tracking_uri=self.uri)
        experiment_id = self._experiment()
        started = int((self.info.started or 0) * 1000) or None
        tags = {"dist_notebook.run_id": self.info.run_id, "dist_notebook.state": "running"}
        parent = client.create_run(
            experiment_id, start_time=started, tags=tags, run_name=self.info.name
        )
        self.parent_id = parent.info.run_id
        params = [Param(k, v[:6000]) for k, v in self.info.params().items()]
        note = RunTag("mlflow.note.content", _note(self.info.code))
        client.log_batch(self.parent_id, params=params, tags=[note])
        for rank in self.info.ranks:
            child = client.create_run(
                experiment_id,
                start_time=started,
                run_name=f"{self.info.name}/rank{rank}",
                tags={"mlflow.parentRunId": self.parent_id, "dist_notebook.rank": str(rank)},
            )
            self.rank_runs[rank] = child.info.run_id
            client.log_batch(child.info.run_id, params=[Param("rank", str(rank))])
        url = None
        if self.uri.startswith(("http://", "https://")):
            url = f"{self.uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{self.parent_id}"
        return {
            "tool": self.tool,
            "location": self.uri,
            "experiment_id": experiment_id,
            "run_id": self.parent_id,
            "url": url,
            "command": _ui_command(self.uri),
        }

    def _experiment(self) -> str:
        wanted = os.environ.get("MLFLOW_EXPERIMENT_ID")
        if wanted:
            return wanted
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        return str(self.client.create_experiment(name))

    def write(self, records: list[Record]) -> None:
        from mlflow.entities import Metric

        by_rank: dict[int, list[Any]] = defaultdict(list)
        for rec in records:
            step, when = self._step(rec), int(rec.time * 1000)
            by_rank[rec.rank].extend(
                Metric(metric_key(k), v, when, step) for k, v in record_values(rec)
            )
        for rank, metrics in by_rank.items():
            run_id = self.rank_runs.get(rank) or self._late_rank(rank)
            for i in range(0, len(metrics), BATCH):
                self.client.log_batch(run_id, metrics=metrics[i : i + BATCH])

    def _late_rank(self, rank: int) -> str:
        # A rank that was not in the run's list (a record from an unexpected rank).
        parent = self.client.get_run(self.parent_id)
        child = self.client.create_run(
            parent.info.experiment_id,
            run_name=f"{self.info.name}/rank{rank}",
            tags={"mlflow.parentRunId": self.parent_id, "dist_notebook.rank": str(rank)},
        )
        self.rank_runs[rank] = child.info.run_id
        return str(child.info.run_id)

    def flush(self) -> None:
        """Nothing to do: every log_batch is written when it returns."""

    def finish(self, state: str, error: str | None) -> None:
        status = STATUS.get(state, "FAILED")
        assert self.parent_id is not None
        self.client.set_tag(self.parent_id, "dist_notebook.state", state)
        if error:
            self.client.set_tag(self.parent_id, "dist_notebook.error", error[:NOTE_LIMIT])
        for run_id in self.rank_runs.values():
            self.client.set_terminated(run_id, status)
        self.client.set_terminated(self.parent_id, status)

    def abort(self) -> None:
        """Nothing to release: MLflow's client holds no open files between calls."""


def _note(code: str) -> str:
    if len(code) > NOTE_LIMIT:
        code = code[:NOTE_LIMIT] + "\n# ... (cut: the whole cell is in the run store)"
    return "```python\n" + code + "\n```"


def _ui_command(uri: str) -> str:
    if uri.startswith("file:"):
        return f"MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {uri}"
    if uri.startswith(("http://", "https://")):
        return ""
    return f"mlflow ui --backend-store-uri {uri}"
