"""The way out to batch: a notebook's ranks' cells as a torchrun script (and sbatch file).

Kernel side: ``export.py`` (``%dist_export``'s work), ``script.py`` and ``sbatch.py`` (the
files' text). Job side, imported by the exported script on every rank: ``runtime.py``
(the cluster's rank set-up) and ``record.py`` (the run in the run store). Nothing here is
imported at package import: the script imports ``runtime`` before torch loads.
"""
