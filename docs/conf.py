"""Sphinx configuration of dist-notebook's documentation (`make docs`).

MyST Markdown pages (myst-nb: the getting-started page is run in a fresh kernel at each
build), the Python API from the docstrings (autodoc), the magics' reference and the state
machines written from the code (_ext/generated.py). Built with warnings as errors.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "_ext"))

project = "dist-notebook"
author = "dist-notebook developers"
copyright = "2026, dist-notebook developers"  # noqa: A001 (Sphinx's name)
# the version's one place: extension/package.json (pyproject reads it too)
release = json.loads((ROOT / "extension" / "package.json").read_text())["version"]
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "generated",
]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**/.ipynb_checkpoints", "jupyter_execute"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]

# The getting-started page runs in a fresh kernel, in a temporary folder (its CSV,
# checkpoints and event files go there); a cell that fails fails the build.
nb_execution_mode = "force"
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_execution_in_temp = True
nb_execution_show_tb = True
nb_merge_streams = True
# a live view's widget state is not saved: the run's final picture and table are shown
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}

html_theme = "furo"
html_title = f"dist-notebook {release}"
