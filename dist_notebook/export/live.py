"""The exporters of one live run, as the collector's sinks."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from ..protocol import Record
from .base import LocationCallback, RunInfo, require
from .worker import CLOSE_TIMEOUT, ExportWorker

log = logging.getLogger("dist_notebook")


class LiveExports:
    """Start the exporters a run asked for; ``sinks`` go to the collector, ``close()``
    after the collector closed (every record fed) with the run's final state."""

    def __init__(
        self,
        info: RunInfo,
        tensorboard: str | Path | None = None,
        mlflow: bool = False,
        on_location: LocationCallback | None = None,
    ) -> None:
        check(tensorboard=tensorboard, mlflow=mlflow)
        self.workers: list[ExportWorker] = []
        if tensorboard is not None:
            from .tensorboard import TensorBoardTarget

            self.workers.append(ExportWorker(TensorBoardTarget(info, tensorboard), on_location))
        if mlflow:
            from .mlflow import MlflowTarget

            self.workers.append(ExportWorker(MlflowTarget(info), on_location))

    @property
    def sinks(self) -> list[Callable[[list[Record]], None]]:
        return list(self.workers)

    def feed(self, records: list[Record]) -> None:
        for worker in self.workers:
            worker(records)

    def close(self, state: str, error: str | None = None, timeout: float = CLOSE_TIMEOUT) -> None:
        for worker in self.workers:
            worker.close(state, error, timeout)


def check(tensorboard: str | Path | None = None, mlflow: bool = False) -> None:
    """ExportUnavailable (naming the extra to install) for a requested exporter whose
    packages are missing."""
    if tensorboard is not None:
        require("tensorboard", "--tensorboard")
    if mlflow:
        require("mlflow", "--mlflow")
