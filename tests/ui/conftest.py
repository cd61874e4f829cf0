"""Browser tests: a real JupyterLab server, started per test, driven by Playwright's chromium.

Every test here carries the ``ui`` marker and is skipped when /usr/bin/chromium is absent
(Debian: ``apt-get install chromium``). Screenshots and the server's log go to
test-artifacts/ui/.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
HERE = Path(__file__).resolve().parent
START_TIMEOUT = 90
PANEL_TAB = '.jp-SideBar .lm-TabBar-tab[data-id="dist-notebook-panel"]'


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ui: browser test (real JupyterLab, chromium)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(
        reason=f"browser tests need chromium at {CHROMIUM} (apt-get install chromium)"
    )
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.ui)
            if not CHROMIUM.exists():
                item.add_marker(skip)


@dataclass
class Lab:
    """A running `jupyter lab` on loopback with its own root dir, store and token."""

    url: str
    token: str
    root: Path
    store: Path
    log: Path
    process: subprocess.Popen

    def lab_url(self, path: str = "lab") -> str:
        return f"{self.url}{path}?token={self.token}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, process: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.25)
    return False


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    # SIGTERM lets the server shut its kernels down; the group holds what it started.
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.fixture
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Lab]:
    """A JupyterLab of this test's own (a fresh store: for tests of empty states)."""
    yield from _lab(tmp_path, request.node.name)


@pytest.fixture(scope="session")
def shared_lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The one JupyterLab of the session behind `shared_lab`."""
    yield from _lab(tmp_path_factory.mktemp("shared-lab"), "shared")


@pytest.fixture
def shared_lab(shared_lab_server: Lab) -> Iterator[Lab]:
    """One JupyterLab for every test that tolerates the others' runs in its store; the
    kernels a test started (and so its clusters) are shut down after it, passed or failed,
    so the next test finds the server idle."""
    yield shared_lab_server
    shut_down_kernels(shared_lab_server)
    forget_layouts(shared_lab_server)


def _api(lab: Lab, path: str, method: str = "GET") -> object:
    return _request(lab, f"api/{path}", method)


def _request(lab: Lab, path: str, method: str = "GET") -> object:
    request = urllib.request.Request(f"{lab.url}{path}?token={lab.token}", method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read()
    return json.loads(body) if body else None


def forget_layouts(lab: Lab) -> None:
    """Delete the workspaces JupyterLab saved, so the next test's page opens only its own
    notebook: a restored layout keeps an earlier test's notebooks open as hidden tabs, whose
    cells a page-wide locator would count."""
    listing = _request(lab, "lab/api/workspaces")
    assert isinstance(listing, dict)
    for workspace in listing["workspaces"]["ids"]:
        _request(lab, f"lab/api/workspaces/{workspace}", method="DELETE")


def shut_down_kernels(lab: Lab, timeout: float = 60) -> None:
    """Shut down every kernel of *lab* through its REST API; fail if any is left after
    *timeout* s."""
    deadline = time.monotonic() + timeout
    while True:
        sessions = _api(lab, "sessions")
        assert isinstance(sessions, list)
        for session in sessions:  # a notebook's session shuts its kernel down with it
            try:
                _api(lab, f"sessions/{session['id']}", method="DELETE")
            except urllib.error.HTTPError as e:
                if e.code != 404:  # 404: it ended meanwhile
                    raise
        kernels = _api(lab, "kernels")
        assert isinstance(kernels, list)
        if not kernels:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"kernels left running on the shared lab: {kernels}; see {lab.log}")
        for kernel in kernels:
            try:
                _api(lab, f"kernels/{kernel['id']}", method="DELETE")
            except urllib.error.HTTPError as e:
                if e.code != 404:  # 404: it ended meanwhile
                    raise
        time.sleep(0.5)


@pytest.fixture
def lab_without_extension(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Lab]:
    """A JupyterLab with dist-notebook's labextension disabled (as VS Code, Colab or a hub
    whose server image lacks it would be): what `jupyter labextension disable` writes."""
    yield from _lab(tmp_path, request.node.name, disabled=("dist-notebook",))


@pytest.fixture
def notebook7(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Lab]:
    """Jupyter Notebook 7 (the `notebook` package) instead of JupyterLab."""
    pytest.importorskip("notebook", minversion="7")
    yield from _lab(tmp_path, request.node.name, app="notebook")


# What each server application is given beyond the common flags.
APP_ARGS = {
    "jupyterlab": [
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ],
    "notebook": ["--JupyterNotebookApp.expose_app_in_browser=True"],
}


def _lab(
    tmp_path: Path, name: str, disabled: tuple[str, ...] = (), app: str = "jupyterlab"
) -> Iterator[Lab]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    root = tmp_path / "root"
    root.mkdir()
    store = tmp_path / "store" / "runs.sqlite"
    token = secrets.token_hex(16)
    env = dict(os.environ)
    env.update(
        DIST_NOTEBOOK_STORE=str(store),
        # nothing from the user's own Jupyter setup: config, settings, workspaces, profiles
        JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lab-workspaces"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        PYTHONUNBUFFERED="1",
    )
    # no news or update prompts over the page in screenshots
    notification = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}'
    )
    if disabled:
        labconfig = tmp_path / "jupyter-config" / "labconfig"
        labconfig.mkdir(parents=True)
        (labconfig / "page_config.json").write_text(
            json.dumps({"disabledExtensions": dict.fromkeys(disabled, True)})
        )
    log = ARTIFACTS / f"{name}-lab.log"
    for _attempt in range(3):
        port = _free_port()  # closed again before the server binds it: retry on a race
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    app,
                    "--no-browser",
                    "--allow-root",
                    "--ServerApp.ip=127.0.0.1",
                    f"--ServerApp.port={port}",
                    "--ServerApp.port_retries=0",
                    f"--IdentityProvider.token={token}",
                    f"--ServerApp.root_dir={root}",
                    *APP_ARGS[app],
                ],
                cwd=root,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        url = f"http://127.0.0.1:{port}/"
        if _wait_ready(f"{url}api/status?token={token}", process, START_TIMEOUT):
            break
        _stop(process)
        if not re.search(r"already in use|Address already", log.read_text(errors="replace")):
            pytest.fail(f"{app} did not start; see {log}")
    else:
        pytest.fail(f"no free port for jupyter lab after 3 tries; see {log}")
    try:
        yield Lab(url, token, root, store, log, process)
    finally:
        _stop(process)


@pytest.fixture
def browser() -> Iterator[object]:
    # Function scope: Playwright's sync API keeps its own event loop running while it is
    # open, and pytest-jupyter's autouse per-test loop fixture would take that loop over.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-failed.png"))
    context.close()
    dn_errors = [e for e in errors if "dist-notebook" in e or "dn-" in e]
    assert not dn_errors, f"errors in the page: {dn_errors}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    report = yield
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report


def shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def open_lab(page, lab: Lab) -> None:  # type: ignore[no-untyped-def]
    page.goto(lab.lab_url())
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    page.wait_for_selector(PANEL_TAB)


def open_panel(page):  # type: ignore[no-untyped-def]
    panel = page.locator("#dist-notebook-panel")
    if not panel.is_visible():
        page.click(PANEL_TAB)
    panel.wait_for(state="visible")
    return panel


# A chart's fit in the space it is shown in (the panel's current run, a run tab, a cell):
# the plot's drawn width, the space's width, and any bar-row column cut or overflowing it.
CHART_FIT = """(chart) => {
  const space = chart.closest('.dn-current-run, .dn-runview, .dn-live') ?? chart.parentElement;
  const room = space.getBoundingClientRect();
  const cut = Array.from(chart.querySelectorAll('.dn-chart-bar-row > *'))
    .filter(c => c.scrollWidth > c.clientWidth + 1
      || c.getBoundingClientRect().right > room.right + 1)
    .map(c => c.className);
  const svg = chart.querySelector('svg.dn-chart-svg');
  return {svg: Number(svg.getAttribute('width')), room: room.width, cut};
}"""
FILLS = f"([chart, wider]) => {{ const f = ({CHART_FIT})(chart);"
FILLS += " return f.svg >= f.room - 48 && f.svg > wider && f.cut.length === 0; }"


def chart_fills(page, chart, wider_than: float = 0, timeout: float = 10_000) -> dict:  # type: ignore[no-untyped-def]
    """Wait until *chart* is drawn across its space (within its margins), wider than
    *wider_than* px, with no bar-row column cut; its fit."""
    handle = chart.element_handle()
    try:
        page.wait_for_function(FILLS, arg=[handle, wider_than], timeout=timeout)
    except Exception as e:
        raise AssertionError(f"chart does not fill its space: {chart.evaluate(CHART_FIT)}") from e
    return chart.evaluate(CHART_FIT)


def drag_left_panel(page, dx: float) -> None:  # type: ignore[no-untyped-def]
    """Drag the handle between the left side panel and the main area by *dx* px."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    box = handle.bounding_box()
    assert box is not None, "no side panel handle"
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + dx / 2, y)
    page.mouse.move(x + dx, y)
    page.mouse.up()


def write_cells(path: Path, cells: list[str]) -> None:
    """A notebook of *cells* (code) at *path*, for the Python 3 kernel."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, path)
