"""Widgets that show a run: they read metrics and never touch the ranks themselves."""

from .dashboard import Dashboard

__all__ = ["Dashboard"]
