"""Connecting to a Ray cluster as ray.init() does, and the one-line errors (rayconnect)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from .conftest import head_env

CONNECT = """
from dist_notebook.cluster.rayconnect import RayConnectError, connect, free_resources
try:
    ray = connect({address!r})
except RayConnectError as e:
    print("ERROR", e)
else:
    print("NODES", [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]])
    print("FREE", free_resources())
"""


def _run(address: str, env: dict[str, str], alone: bool = False) -> str:
    """What CONNECT prints; *alone*: in a PID namespace of its own, where no Ray process
    of this machine (the tests' head) can be found as ray.init("auto") looks for one."""
    unshare = ["unshare", "--pid", "--fork", "--mount-proc"] if alone else []
    done = subprocess.run(
        [*unshare, sys.executable, "-c", CONNECT.format(address=address)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout


def test_no_cluster_says_how_to_start_one() -> None:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1): a PID namespace that sees no Ray process")
    with tempfile.TemporaryDirectory() as temp:
        env = head_env(temp)  # no RAY_ADDRESS, no cluster known in this folder
        env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
        out = _run("", env, alone=True)
    lines = [line for line in out.splitlines() if line.startswith("ERROR")]
    assert lines == [
        "ERROR no Ray cluster is running here and neither --address nor RAY_ADDRESS names "
        "one: start one with `ray start --head --num-cpus N --node-ip-address 127.0.0.1`, "
        "or pass --address HOST:PORT"
    ], out


def test_a_found_cluster_that_does_not_answer_is_named_within_seconds(ray_head: str) -> None:
    """ray.init("auto") finds the tests' head (started to keep loopback) and, without
    the loopback setting here, dials it at the machine's address: it used to retry for
    good under the kernel's reconnect rule (the subprocess hung 120 s)."""
    with tempfile.TemporaryDirectory() as temp:
        env = head_env(temp)
        env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
        started = time.monotonic()
        out = _run("", env)
        took = time.monotonic() - started
    lines = [line for line in out.splitlines() if line.startswith("ERROR")]
    port = ray_head.rpartition(":")[2]
    assert len(lines) == 1, out
    assert lines[0].startswith("ERROR the Ray cluster found here does not answer at "), out
    assert lines[0].split(" within ")[0].endswith(f":{port}"), out
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0" in lines[0], out
    assert took < 60, f"{took:.1f} s to say it"


def test_connects_on_loopback_by_address_and_by_env(ray_head: str) -> None:
    with tempfile.TemporaryDirectory() as temp:
        env = head_env(temp)
        env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")  # connect() sets it for loopback
        by_flag = _run(ray_head, env)
        env["RAY_ADDRESS"] = ray_head
        by_env = _run("", env)
    for out in (by_flag, by_env):
        assert "NODES ['127.0.0.1']" in out, out
        assert "FREE CPU 4/4, GPU 0/0" in out, out


def test_missing_ray_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from dist_notebook.cluster.rayconnect import RayConnectError, connect\n"
        "try: connect('127.0.0.1:1')\n"
        "except RayConnectError as e: print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ
    ).stdout
    assert out.strip() == "--launcher ray needs Ray: pip install 'dist-notebook[ray]'"
