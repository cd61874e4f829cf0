"""Pure data: a run's records per rank and the measures derived from them. No display."""

from .series import RunMetrics

__all__ = ["RunMetrics"]
