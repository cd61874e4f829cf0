"""Pure data: a run's records per rank and the measures derived from them. No display."""

from .series import RankSummary, RunMetrics

__all__ = ["RankSummary", "RunMetrics"]
