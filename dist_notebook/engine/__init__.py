"""Engine side: code that runs in each rank's process.

Importable without IPython display, ipywidgets or matplotlib.
"""

from .reporter import report

__all__ = ["report"]
