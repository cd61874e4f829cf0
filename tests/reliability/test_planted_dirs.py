"""A folder another local user made in advance, at a path we would use, is refused.

The scenario: a second Unix user creates the per-user fallback folder
(``$TMPDIR/dist-notebook-<uid>``) or the ``ipython`` folder beside a store kept in a
shared directory, before the victim starts a cluster, so as to swap in a cluster
directory and connection file of their own later. The start must be refused with a
message that names the folder and the fix, start no process, and write nothing there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

from .isolated import can_isolate, run_isolated

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("useradd") is None,
        reason="needs root and useradd to create a second Unix user (CI runs as root)",
    ),
]

# Starts a cluster; prints what the start said and the processes running after it.
VICTIM = textwrap.dedent(
    """
    import psutil
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "dist_notebook")
    try:
        ip.run_line_magic("dist_cluster", "start -n 2 --cpu")
        print("STARTED", flush=True)
        ip.run_line_magic("dist_cluster", "stop")
    except Exception as e:
        print("REFUSED", type(e).__name__, e, flush=True)
    me = psutil.Process()
    for p in me.children(recursive=True):
        print("CHILD", " ".join(p.cmdline()), flush=True)
    """
)


@pytest.fixture(scope="module")
def planter(second_user: tuple[int, int]) -> tuple[int, int]:
    return second_user


def plant(user: tuple[int, int], folder: Path) -> None:
    """As the second user: make *folder* (world-writable, as an attacker would)."""
    uid, gid = user
    subprocess.run(
        ["mkdir", "-p", "-m", "777", str(folder)],
        user=uid,
        group=gid,
        extra_groups=[],
        check=True,
        timeout=30,
    )
    assert folder.stat().st_uid == uid


def assert_refused(proc: subprocess.CompletedProcess[str], folder: Path) -> None:
    out = proc.stdout
    assert "STARTED" not in out, out + proc.stderr
    refused = [line for line in out.splitlines() if line.startswith("REFUSED")]
    assert refused, out + proc.stderr
    assert str(folder) in refused[0] and "belongs to another user" in refused[0], refused
    assert "rm -rf" in refused[0]  # the fix
    assert "Traceback" not in out
    children = [line for line in out.splitlines() if line.startswith("CHILD")]
    # No controller and no engine ran (the kernel's fork server has forked nothing).
    starts = ("dist_notebook.boot.controller", "dist_notebook.boot.engine")
    assert not [c for c in children if any(start in c for start in starts)], children
    assert list(folder.iterdir()) == []  # nothing of ours went into their folder


def test_planted_folder_beside_a_shared_store_is_refused(
    planter: tuple[int, int], shared_dir: Path
) -> None:
    planted = shared_dir / "ipython"
    plant(planter, planted)
    proc = run_isolated(
        VICTIM, env={"DIST_NOTEBOOK_STORE": str(shared_dir / "runs.sqlite")}, timeout=180
    )
    assert_refused(proc, planted)


@pytest.mark.skipif(not can_isolate(), reason="a read-only store folder for root needs unshare")
def test_planted_fallback_folder_is_refused(planter: tuple[int, int], shared_dir: Path) -> None:
    store_dir = Path(tempfile.mkdtemp(prefix="dn-ro-store-"))
    try:
        planted = shared_dir / f"dist-notebook-{os.getuid()}"
        plant(planter, planted)
        proc = run_isolated(
            VICTIM,
            read_only=[store_dir],  # the store's own folder cannot take the profile
            env={"DIST_NOTEBOOK_STORE": str(store_dir / "runs.sqlite"), "TMPDIR": str(shared_dir)},
            timeout=180,
        )
        assert_refused(proc, planted)
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
