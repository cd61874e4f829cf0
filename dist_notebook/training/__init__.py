"""Kernel side of training runs: submit, collect metrics, record the outcome."""

from .history import Run, list_runs, load_run
from .run import RunResult, RunSpec, RunState, TrainingRun

__all__ = ["Run", "RunResult", "RunSpec", "RunState", "TrainingRun", "list_runs", "load_run"]
