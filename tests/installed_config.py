"""The Jupyter config this package installs, laid out as the install lays it out.

pyproject's ``[tool.hatch.build.targets.wheel.shared-data]`` maps ``jupyter-config/*``
folders to ``<prefix>/etc/jupyter/...``. ``layout(dest)`` copies this environment's own
``<prefix>/etc/jupyter`` (ipyparallel's files among them) into *dest* and puts ours
beside them by that table, so files of one folder are read in the order a real install
reads them (jupyter_server and jupyterlab_server: ``*.d/*.json`` sorted by name). Set
``JUPYTER_CONFIG_PATH`` to the result: it is read before the environment's own folder.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


SECTION = "[tool.hatch.build.targets.wheel.shared-data]"


def shared_data() -> dict[str, str]:
    """pyproject's shared-data table, {source: destination} (read by hand: tomllib is
    Python 3.11's, and the table is one "a" = "b" a line)."""
    table: dict[str, str] = {}
    inside = False
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("["):
            inside = line.strip() == SECTION
        elif inside and (m := re.match(r'\s*"([^"]+)"\s*=\s*"([^"]+)"', line)):
            table[m.group(1)] = m.group(2)
    return table


def layout(dest: Path) -> Path:
    """Return *dest*/etc/jupyter, filled as an install of this package fills it."""
    etc = dest / "etc" / "jupyter"
    own = Path(sys.prefix) / "etc" / "jupyter"
    if own.is_dir():
        shutil.copytree(own, etc, symlinks=False)
    etc.mkdir(parents=True, exist_ok=True)
    for source, target in shared_data().items():
        if not target.startswith("etc/jupyter"):
            continue
        where = dest / target
        where.mkdir(parents=True, exist_ok=True)
        shutil.copytree(ROOT / source, where, dirs_exist_ok=True)
    return etc
