"""Runs out to TensorBoard and MLflow: live from the collector, or after the fact.

Optional: ``pip install 'dist-notebook[tensorboard]'`` / ``'dist-notebook[mlflow]'``.
"""

from .base import ExportUnavailable, RunInfo, flags_json, flags_of
from .live import LiveExports, check
from .stored import EXPORT_EVENT, FLAGS_EVENT, export_stored, exports_of, run_info

__all__ = [
    "EXPORT_EVENT",
    "FLAGS_EVENT",
    "ExportUnavailable",
    "LiveExports",
    "RunInfo",
    "check",
    "export_stored",
    "exports_of",
    "flags_json",
    "flags_of",
    "run_info",
]
