"""A wheel built from a clean clone on a machine without Node.js fails, saying what to
install: never a wheel without the side panel and the live view (tools/frontend_build.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(600)


def test_a_wheel_built_without_node_fails_naming_the_fix(tmp_path: Path) -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout (a clean copy of its files)")
    # A clean clone's files: what git tracks, none of the built front end.
    archive = subprocess.run(
        ["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True, timeout=120
    ).stdout
    src = tmp_path / "src"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    assert not list((src / "dist_notebook" / "display" / "static").glob("*.js"))
    # A PATH with this Python and nothing else: no node, no npm.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = str(bin_dir)
    done = subprocess.run(
        ["python", "-m", "build", "--wheel", "--outdir", str(tmp_path / "out"), "."],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert not list((tmp_path / "out").glob("*.whl")) if (tmp_path / "out").exists() else True
    assert (
        "dist-notebook's front end is not built and node and npm are not on PATH: "
        "install Node.js >= 20.19 with npm"
    ) in out, out[-3000:]
