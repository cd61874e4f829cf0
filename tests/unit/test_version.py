"""The version is written once: extension/package.json, which the build backend reads
for the Python package (hatch-nodejs-version) and the labextension carries."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_takes_its_version_from_package_json() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"], "pyproject.toml spells a version again"
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"] == {
        "source": "nodejs",
        "path": "extension/package.json",
    }
    npm = json.loads((ROOT / "extension" / "package.json").read_text())["version"]
    assert version("dist-notebook") == npm, "the installed package is stale: run make venv"
