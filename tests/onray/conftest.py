"""A Ray head on loopback for the Ray tests, started once for tests/onray and ended after them.

Package scope, not session: a head left running (gcs, raylet, its prestarted workers) took
CPU from every later test of the run, and two kernels starting clusters right after it
missed their 120 s bound on a 2-core machine.

``ray start --head --block`` stays our child: ending it (SIGTERM) ends every process it
started. Its ports are Ray's own choice (0), but for the Ray Client server, which takes
no 0: a free port found now. Its files go to a private temporary folder.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# This process imports Ray now (below) and connects to the loopback head later: Ray
# keeps 127.0.0.1 only if this is set before it is imported (rayconnect.py).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Token authentication, with a token of the tests' own: the head, this process (it is
# read when Ray is imported), the tests' subprocesses and the Ray workers share it, and
# no token of this machine's (~/.ray/auth_token, RAY_AUTH_TOKEN) is taken for it.
_TOKEN_DIR = tempfile.mkdtemp(prefix="ray-token-")
atexit.register(shutil.rmtree, _TOKEN_DIR, True)
os.environ.pop("RAY_AUTH_TOKEN", None)
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN_PATH"] = os.path.join(_TOKEN_DIR, "auth_token")
with os.fdopen(
    os.open(os.environ["RAY_AUTH_TOKEN_PATH"], os.O_CREAT | os.O_WRONLY, 0o600), "w"
) as f:
    f.write(secrets.token_hex(32))
pytest.importorskip("ray")

START_TIMEOUT_S = 150.0
STOP_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def head_env(temp: str) -> dict[str, str]:
    """The environment of a Ray process of the tests: no address, its files in *temp*
    (the tests' token: see above)."""
    # None of what Ray set in this process once it was a driver (a no-cluster subprocess
    # hung 120 s after test_auto_restart had connected this one): only the tests' token.
    keep = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") or k in keep}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keep 127.0.0.1 (rayconnect.py)
    env["RAY_TMPDIR"] = temp
    # A Ray node's python and torchrun are on its PATH (a Ray job's entrypoint is a shell
    # command there): this environment's.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@contextmanager
def started_head(num_cpus: int = 4) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A Ray head on loopback of *num_cpus* CPUs, ended after the block: its address
    (127.0.0.1:PORT) and its ``ray start --block`` process (our child)."""
    temp = tempfile.mkdtemp(prefix="ray-")
    ray = Path(sys.executable).with_name("ray")
    cmd = [str(ray), "start", "--head", "--block", "--num-cpus", str(num_cpus)]
    cmd += ["--node-ip-address", "127.0.0.1", "--port", "0", "--dashboard-host", "127.0.0.1"]
    cmd += ["--dashboard-port", "0", "--ray-client-server-port", str(_free_port())]
    cmd += ["--temp-dir", temp, "--disable-usage-stats"]
    log = open(os.path.join(temp, "head.log"), "wb")  # noqa: SIM115  closed below
    head = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=head_env(temp))
    address_file = Path(temp) / "ray_current_cluster"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while not (address_file.exists() and address_file.read_text().strip()):
            if head.poll() is not None or time.monotonic() > deadline:
                log.flush()
                tail = Path(temp, "head.log").read_text(errors="replace")[-2000:]
                pytest.fail(f"the Ray head did not start ({head.poll()}):\n{tail}")
            time.sleep(0.5)
        address = address_file.read_text().strip()
        assert address.startswith("127.0.0.1:"), address
        yield address, head
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait(STOP_TIMEOUT_S)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="package")
def ray_head() -> Iterator[str]:
    """The head's address (127.0.0.1:PORT), with 4 CPUs."""
    with started_head() as (address, _):
        yield address
