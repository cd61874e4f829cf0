"""dist-notebook installed as users install it: from its wheel into fresh virtual
environments, with nothing of the checkout on their ``sys.path``.

What is built once for every test here (package scope: the venvs are shared, never changed
by a test):

- ``dist``: ``python -m build`` of the checkout (the sdist, then the wheel built from that
  sdist, as PyPI's users get them; the front end is already built, so the build hook skips
  npm), checked by ``twine check --strict``;
- ``lab_env``: JupyterLab 4.6.4 (a supported 4.x, not the newest) from the registry, then
  ``torch==2.13.0``, then ``dist-notebook[lab]`` from the wheel: one environment for the
  server and its kernels, and the hub's server environment;
- ``kernel_env``: ``torch==2.13.0`` and the wheel without extras: the hub's kernels;
- ``bare_kernel_env``: ipykernel only: a kernel without dist-notebook.

Venv creation and pip run with pip's own cache (``~/.cache/pip``), so a second session
downloads nothing. The browser helpers are the UI tests' (tests/ui/conftest.py).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from ui.conftest import (
    APP_ARGS,
    ARTIFACTS,
    CHROMIUM,
    START_TIMEOUT,
    _free_port,
    _stop,
    _wait_ready,
    browser,
    page,
    pytest_runtest_makereport,
)

ROOT = Path(__file__).resolve().parents[2]
TORCH = "torch==2.13.0"  # the Makefile's pin
OLD_LAB = "4.6.4"  # a JupyterLab 4.x the lab extra supports (>=4.6,<5), not the newest
PIP_TIMEOUT_S = 900
HERE = Path(__file__).resolve().parent
# the UI tests' browser fixtures, and the hook that lets page keep a failed test's screenshot
SHARED = (browser, page, pytest_runtest_makereport)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "install: installs the built wheel into fresh venvs")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.install)
            item.add_marker(pytest.mark.slow)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything that would put the checkout or this
    interpreter's packages on a venv's path."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)
    )
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


def run(args: list[str | Path], tool: bool = False, timeout: float = PIP_TIMEOUT_S) -> str:
    """Run *args* outside the checkout in a clean environment (*tool*: this interpreter's,
    for build and twine); its output, or a failure with it."""
    done = subprocess.run(
        [str(a) for a in args],
        cwd=Path.home(),
        env=dict(os.environ) if tool else clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, args))} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


@dataclass
class Venv:
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def pip(self, *args: str | Path) -> str:
        return run([self.python, "-m", "pip", "install", "-q", *args])

    def site_packages(self) -> Path:
        out = run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        return Path(out.strip())

    def version(self, dist: str) -> str:
        code = f"import importlib.metadata as m; print(m.version({dist!r}))"
        return run([self.python, "-c", code]).strip()


def make_venv(path: Path) -> Venv:
    run([sys.executable, "-m", "venv", path])
    return Venv(path)


@dataclass
class Dist:
    wheel: Path
    sdist: Path
    twine: str
    took_s: float


@pytest.fixture(scope="package")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist and the wheel built from it, as a release builds them."""
    out = tmp_path_factory.mktemp("dist")
    started = time.monotonic()
    run([sys.executable, "-m", "build", "--outdir", out, ROOT], tool=True)
    took = time.monotonic() - started
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(out.iterdir())
    twine = run(
        [sys.executable, "-m", "twine", "check", "--strict", wheels[0], sdists[0]], tool=True
    )
    print(f"\npython -m build: {took:.1f} s; {wheels[0].name} {wheels[0].stat().st_size} bytes")
    return Dist(wheels[0], sdists[0], twine, took)


def timed(what: str, started: float) -> None:
    print(f"\n{what}: {time.monotonic() - started:.1f} s")


@pytest.fixture(scope="package")
def lab_env(tmp_path_factory: pytest.TempPathFactory, dist: Dist) -> Venv:
    started = time.monotonic()
    env = make_venv(tmp_path_factory.mktemp("lab") / "venv")
    env.pip(f"jupyterlab=={OLD_LAB}")
    env.pip(TORCH)
    env.pip(f"{dist.wheel}[lab]")
    timed("lab venv (JupyterLab, torch, the wheel with [lab])", started)
    return env


@pytest.fixture(scope="package")
def kernel_env(tmp_path_factory: pytest.TempPathFactory, dist: Dist) -> Venv:
    started = time.monotonic()
    env = make_venv(tmp_path_factory.mktemp("kernel") / "venv")
    env.pip(TORCH)
    env.pip(dist.wheel)
    timed("kernel venv (torch, the wheel)", started)
    return env


@pytest.fixture(scope="package")
def bare_kernel_env(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    env = make_venv(tmp_path_factory.mktemp("bare") / "venv")
    env.pip("ipykernel")
    return env


def kernelspec(prefix: Path, name: str, python: Path) -> Path:
    """A kernelspec *name* under *prefix*/share/jupyter/kernels running *python*'s
    ipykernel (what ``ipykernel install --prefix`` writes); the prefix's share/jupyter."""
    spec = prefix / "share" / "jupyter" / "kernels" / name
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": name, "language": "python"})
    )
    return prefix / "share" / "jupyter"


@dataclass
class Server:
    url: str
    token: str
    root: Path
    log: Path

    def lab_url(self, path: str = "lab") -> str:
        return f"{self.url}{path}?token={self.token}"


def start_lab(
    env: Venv,
    tmp: Path,
    name: str,
    jupyter_path: Path | None = None,
    without_server_extension: bool = False,
) -> Iterator[Server]:
    """``jupyter lab`` of *env* on loopback, with its own root, store, config and token."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    root = tmp / "root"
    root.mkdir()
    token = secrets.token_hex(16)
    extra = {
        "DIST_NOTEBOOK_STORE": str(tmp / "store" / "runs.sqlite"),
        "JUPYTER_CONFIG_DIR": str(tmp / "jupyter-config"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp / "lab-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "lab-workspaces"),
        "IPYTHONDIR": str(tmp / "ipython"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        "PYTHONUNBUFFERED": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    if jupyter_path is not None:
        extra["JUPYTER_PATH"] = str(jupyter_path)
    server_env = clean_env(**extra)
    notification = tmp / "lab-settings" / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}'
    )
    if without_server_extension:
        # the labextension is there, the server extension is off: what a server's config
        # turning it off says (`jupyter server extension disable` writes the same key)
        config = tmp / "jupyter-config"
        config.mkdir()
        (config / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": {"dist_notebook.server": False}}})
        )
    log = ARTIFACTS / f"install-{name}-lab.log"
    port = _free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                str(env.python),
                "-m",
                "jupyterlab",
                "--no-browser",
                "--allow-root",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
                *APP_ARGS["jupyterlab"],
            ],
            cwd=root,
            env=server_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/"
    try:
        if not _wait_ready(f"{url}api/status?token={token}", process, START_TIMEOUT):
            pytest.fail(f"jupyter lab of {env.path} did not start; see {log}")
        yield Server(url, token, root, log)
    finally:
        _stop(process)


@pytest.fixture
def needs_chromium() -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"browser tests need chromium at {CHROMIUM} (apt-get install chromium)")
