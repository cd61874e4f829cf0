"""Only a detached cluster's owner can attach to it or command it (issue #27).

A real second Unix user, with the run store of the cluster's owner in a folder every
user may enter (a shared project folder, like /tmp): ``%dist_cluster attach`` there is
refused in one line naming the owner, and requests sent straight to the keeper's
loopback port (which any local user can find) without the owner's keys get no answer
at all, and the keeper goes on serving its owner: the cluster is still ready and its ranks
still run cells.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from dist_notebook.cluster.spec import ClusterSpec
from dist_notebook.detached.attached import AttachedCluster, start_detached

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("useradd") is None,
        reason="needs root and useradd to create a second Unix user (CI runs as root)",
    ),
]

# The second user's Python: this interpreter's version from the system, with this
# environment's packages on its path (the environment's own interpreter may sit in a
# folder only its owner can enter).
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"

ATTACH = textwrap.dedent(
    """
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "dist_notebook")
    ip.run_cell("%dist_cluster attach")  # as a notebook's cell: what the user sees
    """
)

FORGE = textwrap.dedent(
    """
    import json, sys, time, zmq

    endpoint = sys.argv[1]
    ctx = zmq.Context()
    for signature in (b"0" * 64, b"not-a-signature"):
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.RCVTIMEO, 10000)
        sock.connect(endpoint)
        body = json.dumps({"op": "stop", "args": {"kernel": 1}, "t": time.time()}).encode()
        sock.send_multipart([signature, body])
        try:
            print("REPLY", sock.recv_multipart(), flush=True)
        except zmq.ZMQError:  # a timeout, or the REQ socket reset by the dropped link
            print("NO REPLY", flush=True)
        sock.close()
    """
)


def as_user(
    user: tuple[int, int], script: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    uid, gid = user
    home = Path(tempfile.mkdtemp(prefix="dn-home-"))
    os.chown(home, uid, gid)
    paths = [p for p in sys.path if p.endswith("site-packages")]
    root = str(Path(__file__).resolve().parents[2])
    try:
        return subprocess.run(
            [SYSTEM_PYTHON, "-c", script, *args],
            user=uid,
            group=gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=home,
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(home),
                "PYTHONPATH": os.pathsep.join([root, *paths]),
                **(env or {}),
            },
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture()
def other(second_user: tuple[int, int]) -> tuple[int, int]:
    """The second user, once it is known that it can run this checkout's code."""
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"no {SYSTEM_PYTHON} for the second user to run")
    probe = as_user(second_user, "import zmq, IPython, dist_notebook")
    if probe.returncode != 0:
        pytest.skip(
            "the second user cannot read this checkout or its environment (a private "
            f"folder above them): {probe.stderr.strip().splitlines()[-1:]}"
        )
    return second_user


def test_another_user_can_neither_attach_nor_command_the_keeper(
    other: tuple[int, int], shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = shared_dir / "runs.sqlite"
    monkeypatch.setenv("DIST_NOTEBOOK_STORE", str(store))
    cluster: AttachedCluster | None = None
    try:
        cluster = start_detached(ClusterSpec(n=2, threads=1), None, progress=lambda _: None)
        attach = as_user(other, ATTACH, env={"DIST_NOTEBOOK_STORE": str(store)})
        text = attach.stdout + attach.stderr
        refusals = [x for x in text.splitlines() if x.startswith("UsageError: ")]
        assert len(refusals) == 1, text
        assert "belong to another user (uid 0)" in refusals[0], refusals
        assert "only their owner can attach" in refusals[0], refusals
        assert "Traceback" not in text, text

        forged = as_user(other, FORGE, cluster.link.file.endpoint)
        # No answer at all: a peer without the link's keys never gets past the handshake,
        # and nothing comes back that says what listens there.
        lines = forged.stdout.splitlines()
        assert lines == ["NO REPLY", "NO REPLY"], forged.stdout + forged.stderr
        assert cluster.refresh()["state"] == "ready"  # the keeper serves its owner still
        client = cluster.require_ready()
        client[:].execute("answer = 6 * 7", block=True)
        assert client[:].pull("answer", block=True) == [42, 42]
    finally:
        if cluster is not None:
            cluster.stop_sync()
