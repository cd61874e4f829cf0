"""The suite's own guard: a process a test starts and leaves running fails the session."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]

CONFTEST = (
    "from tests.conftest import (  # noqa: F401\n"
    "    pytest_runtest_teardown, pytest_sessionfinish, pytest_sessionstart\n)\n"
)
LEAKS = textwrap.dedent(
    """
    import subprocess, sys
    def test_leaves_a_process():
        # Detached into a session of its own, as an orphaned engine would be.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         start_new_session=True)
    """
)
CLEAN = textwrap.dedent(
    """
    import subprocess, sys
    def test_waits_for_its_process():
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    """
)


def run_pytest(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=folder,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


@pytest.mark.parametrize(("body", "fails"), [(LEAKS, True), (CLEAN, False)], ids=["leak", "clean"])
def test_a_process_outliving_the_session_fails_it(tmp_path: Path, body: str, fails: bool) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(body)
    proc = run_pytest(tmp_path)
    if fails:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "1 process(es) started by the tests outlived the session" in proc.stdout
        assert "time.sleep(60)" in proc.stdout
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "outlived" not in proc.stdout
