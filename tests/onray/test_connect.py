"""Connecting to a Ray cluster as ray.init() does, and the one-line errors (rayconnect)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

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


def _run(address: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CONNECT.format(address=address)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout


def test_no_cluster_says_how_to_start_one() -> None:
    with tempfile.TemporaryDirectory() as temp:
        env = head_env(temp)  # no RAY_ADDRESS, no cluster known in this folder
        env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
        out = _run("", env)
    lines = [line for line in out.splitlines() if line.startswith("ERROR")]
    assert lines == [
        "ERROR no Ray cluster is running here and neither --address nor RAY_ADDRESS names "
        "one: start one with `ray start --head --num-cpus N --node-ip-address 127.0.0.1`, "
        "or pass --address HOST:PORT"
    ], out


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
