"""One cluster panel: ipyparallel's own ("IPython Parallel", whose START launches a plain
cluster without the torch wiring) is off in an install of ours, labextension and server
extension both; the README's way to turn it back on works.

The JupyterLab here reads the Jupyter config as an install of this package lays it out
(tests/installed_config.py: the environment's own etc/jupyter, ipyparallel's files among
them, with ours beside them by pyproject's shared-data table), so the shared environment
is not reinstalled for the test.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from installed_config import layout
from playwright.sync_api import expect

from .conftest import PANEL_TAB, Lab, _lab, open_lab, open_panel, shot

IPP_TAB = '.jp-SideBar .lm-TabBar-tab[data-id="ipp-cluster-launcher"]'
IPP_PANEL = "#ipp-cluster-launcher"  # its sidebar widget: a list of clusters, "+ NEW"


def _installed_lab(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch, turned_on: bool
) -> Iterator[Lab]:
    etc = layout(tmp_path / "prefix")
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(etc))
    if turned_on:
        # What `jupyter labextension enable ipyparallel-labextension` writes at its
        # default level (sys_prefix: here the laid-out prefix).
        (etc / "labconfig" / "page_config.json").write_text(
            json.dumps({"disabledExtensions": {"ipyparallel-labextension": False}})
        )
        # The README's jupyter_server_config.json in the user's config folder.
        user = tmp_path / "lab" / "jupyter-config"
        user.mkdir(parents=True)
        (user / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": {"ipyparallel": True}}})
        )
    (tmp_path / "lab").mkdir(exist_ok=True)
    yield from _lab(tmp_path / "lab", name)


@pytest.fixture
def installed_lab(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Lab]:
    yield from _installed_lab(tmp_path, request.node.name, monkeypatch, turned_on=False)


@pytest.fixture
def lab_with_ipyparallel_on(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Lab]:
    yield from _installed_lab(tmp_path, request.node.name, monkeypatch, turned_on=True)


def clusters_status(lab: Lab) -> int:
    """HTTP status of ipyparallel's server extension's REST API (GET /ipyparallel/clusters)."""
    try:
        with urllib.request.urlopen(
            f"{lab.url}ipyparallel/clusters?token={lab.token}", timeout=20
        ) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def sidebar_titles(page) -> list[str]:  # type: ignore[no-untyped-def]
    tabs = page.locator(".jp-SideBar .lm-TabBar-tab")
    return [str(tabs.nth(i).get_attribute("title") or "") for i in range(tabs.count())]


def test_no_ipython_parallel_panel(page, installed_lab: Lab) -> None:  # type: ignore[no-untyped-def]
    assert clusters_status(installed_lab) == 404  # its server extension is not loaded
    open_lab(page, installed_lab)
    open_panel(page)
    # Every plugin has started once the splash is gone; give a late one a moment.
    page.wait_for_timeout(1500)
    expect(page.locator(PANEL_TAB)).to_have_count(1)
    expect(page.locator(IPP_TAB)).to_have_count(0)
    expect(page.locator(IPP_PANEL)).to_have_count(0)
    assert not any("IPython Parallel" in t for t in sidebar_titles(page))
    shot(page, "one-cluster-panel")


def test_ipython_parallel_panel_turned_back_on(page, lab_with_ipyparallel_on: Lab) -> None:  # type: ignore[no-untyped-def]
    # The README's two steps bring it back (and prove IPP_TAB finds it when it is there).
    assert clusters_status(lab_with_ipyparallel_on) == 200
    open_lab(page, lab_with_ipyparallel_on)
    expect(page.locator(IPP_TAB)).to_have_count(1)
    page.click(IPP_TAB)
    launcher = page.locator(IPP_PANEL)
    expect(launcher).to_be_visible()
    expect(launcher).to_contain_text(re.compile("clusters", re.IGNORECASE))
    shot(page, "ipython-parallel-panel-turned-on")
