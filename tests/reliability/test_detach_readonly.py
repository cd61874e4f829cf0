"""``--detach`` with a run store in a read-only folder is refused at once, in one line
naming the fix: its keeper file and its runs' records could not be kept there, so the
cluster could be neither listed nor attached again (it ran until killed by hand)."""

from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path

import pytest

from .isolated import run_isolated

pytestmark = pytest.mark.timeout(200)

SCRIPT = textwrap.dedent(
    """
    from IPython.testing.globalipapp import start_ipython
    from dist_notebook.magics.session import Session

    ip = start_ipython()
    ip.run_line_magic("load_ext", "dist_notebook")
    ip.run_cell("%dist_cluster start -n 2 --cpu --detach")
    cluster = Session.for_shell(ip).cluster
    print("KEEPER", getattr(cluster, "keeper_pid", None), flush=True)
    """
)


def test_detach_with_a_read_only_store_folder_is_refused(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    proc = run_isolated(SCRIPT, read_only=[shelf], env={"DIST_NOTEBOOK_STORE": str(shelf / "r.db")})
    out = proc.stdout + proc.stderr
    keeper = [x.split()[1] for x in out.splitlines() if x.startswith("KEEPER ")]
    if keeper and keeper[0] != "None":  # started anyway: end it, then fail
        os.kill(int(keeper[0]), signal.SIGTERM)
    assert keeper == ["None"], out
    refusals = [x for x in out.splitlines() if x.startswith("UsageError: ")]
    assert len(refusals) == 1, out
    assert "cannot be written" in refusals[0] and "DIST_NOTEBOOK_STORE" in refusals[0], refusals
    assert "without --detach" in refusals[0], refusals
    assert "Traceback" not in out, out
