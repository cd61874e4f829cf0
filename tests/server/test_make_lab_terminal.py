"""A terminal opened in `make lab`'s JupyterLab runs the exported script as printed: the
server that `make lab` starts (its own recipe, a fresh workspace folder) is asked for a
terminal as JupyterLab's launcher asks (POST /api/terminals, no cwd or the file browser's
folder), and the terminal's websocket is typed into: it starts in the workspace, and
``torchrun --standalone --nproc-per-node 2 hello.py`` (the line %dist_export prints) runs
there with the environment's torchrun, even where ~/.bashrc puts another folder holding a
``torchrun`` first on PATH (bash) and for a shell with no rc file (sh). The make process
gets a PATH without the environment's bin, as a user's shell before ``make lab`` has.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
ENV_BIN = Path(sys.executable).parent
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT = 90
# One rank each, a collective between them: what a torchrun-style script does.
HELLO = """import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print(f"hello from rank {dist.get_rank()} of {dist.get_world_size()}: {t.item():.0f}")
dist.destroy_process_group()
"""
# What %dist_export prints to run it (batch/export.py summary(): 'run it: ...').
COMMAND = "torchrun --standalone --nproc-per-node 2 hello.py"


@dataclass
class Server:
    url: str
    token: str
    workspace: Path
    log: Path


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to make's whole group (make, the server, its terminals), then SIGKILL."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def _ready(url: str, process: subprocess.Popen) -> bool:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:  # not listening yet (URLError is an OSError)
            time.sleep(0.25)
    return False


@pytest.fixture(scope="module", params=["bash", "sh"])
def make_lab(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """`make lab` with a fresh workspace, its own Jupyter folders, a HOME whose ~/.bashrc
    puts a folder with a wrong ``torchrun`` first on PATH, and the given login shell."""
    tmp_path = tmp_path_factory.mktemp(f"make-lab-{request.param}")
    home = tmp_path / "home"
    decoy = home / "decoy-bin"
    decoy.mkdir(parents=True)
    (decoy / "torchrun").write_text("#!/bin/sh\necho 'not the environment torchrun'\nexit 3\n")
    (decoy / "torchrun").chmod(0o755)
    (home / ".bashrc").write_text(f'export PATH="{decoy}:$PATH"\n')
    workspace = tmp_path / "workspace"
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(
        PATH=SYSTEM_PATH,
        HOME=str(home),
        SHELL=f"/bin/{request.param}",
        JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lab-workspaces"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        DIST_NOTEBOOK_STORE=str(tmp_path / "store" / "runs.sqlite"),
    )
    log = tmp_path / "make-lab.log"
    for _attempt in range(3):
        port = _free_port()  # closed again before the server binds it: retry on a race
        lab_args = (
            f"--no-browser --ServerApp.port={port} --ServerApp.port_retries=0 "
            f"--IdentityProvider.token={token} --LabApp.news_url= "
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"
        )
        with open(log, "wb") as out:
            # -o: the environment and the front end are built already (not remade here)
            process = subprocess.Popen(
                ["make", "-o", "venv", "-o", "ext-build", f"WORKSPACE={workspace}"]
                + [f"LAB_ARGS={lab_args}", "lab"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        url = f"http://127.0.0.1:{port}/"
        if _ready(f"{url}api/status?token={token}", process):
            break
        _stop(process)
        if "already in use" not in log.read_text(errors="replace"):
            pytest.fail(f"make lab did not start a server: {log.read_text()[-3000:]}")
    else:
        pytest.fail(f"no free port for make lab after 3 tries: {log}")
    try:
        yield Server(url, token, workspace, log)
    finally:
        _stop(process)


def _post(server: Server, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{server.url}{path}?token={server.token}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.loads(response.read()))


async def _type(server: Server, name: str, line: str, timeout: float) -> str:
    """Type *line* into terminal *name*; its output up to the line's 'END <status>'."""
    from tornado.websocket import websocket_connect

    ws_url = server.url.replace("http://", "ws://")
    ws = await websocket_connect(f"{ws_url}terminals/websocket/{name}?token={server.token}")
    seen = ""
    try:
        await ws.write_message(json.dumps(["stdin", f"{line}; echo END $?\r"]))
        deadline = time.monotonic() + timeout
        while not re.search(r"END \d+", seen):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"the terminal did not finish in {timeout} s: {seen!r}")
            message = await asyncio.wait_for(ws.read_message(), left)
            if message is None:
                raise AssertionError(f"the terminal closed: {seen!r}")
            kind, *payload = json.loads(message)
            if kind == "stdout":
                seen += str(payload[0])
    finally:
        ws.close()
    return seen


@pytest.mark.parametrize("cwd", [None, "", "nested"], ids=["no-cwd", "root", "nested"])
def test_a_terminal_from_make_lab_runs_the_exported_command(make_lab: Server, cwd) -> None:  # type: ignore[no-untyped-def]
    server = make_lab
    assert any(server.workspace.glob("*.ipynb")), "make lab copies the notebooks there"
    folder = server.workspace / (cwd or "")
    folder.mkdir(exist_ok=True)
    (folder / "hello.py").write_text(HELLO)
    # JupyterLab's launcher: {cwd: the file browser's folder}, none at the root
    terminal = _post(server, "api/terminals", {} if cwd is None else {"cwd": cwd})
    line = f"pwd; command -v torchrun; {COMMAND}"
    out = asyncio.run(_type(server, terminal["name"], line, timeout=180))
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.replace("\r", ""))  # no terminal codes
    assert re.search(r"END 0\b", text), text[-3000:]
    assert f"\n{folder.resolve()}\n" in text, text[-3000:]
    assert f"\n{ENV_BIN / 'torchrun'}\n" in text, text[-3000:]
    assert "not the environment torchrun" not in text, text[-3000:]
    for rank in (0, 1):
        assert f"hello from rank {rank} of 2: 2" in text, text[-3000:]
