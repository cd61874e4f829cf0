"""The wheel, installed as users install it (conftest.py builds it and the venvs once):
what it holds, what twine says, JupyterLab's version kept by the lab extra, and in
chromium: the live chart mid-run, the side panel's cluster and the server extension's
answer, in one environment and in a hub's two (server and kernel), the panel's one line
where the server lacks our server extension, and the ModuleNotFoundError of a kernel
without the package.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import expect
from ui.conftest import PANEL_TAB, shot
from ui.test_live_anywidget import KERNEL_IDLE, cell, command, end_run, until_ended

from .conftest import OLD_LAB, ROOT, Dist, Server, Venv, kernelspec, start_lab

pytestmark = pytest.mark.timeout(1800)  # the first test pays for the build and the venvs

PROBE = """import sys, dist_notebook
print('PREFIX', sys.prefix)
print('MODULE', dist_notebook.__file__)
print('PATH', sys.path)"""
TRAIN = """%%dist_train --name installed --steps 20000
import time
import torch, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(20000):
    x = torch.randn(64, 16)
    loss = (model(x) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    report(step=i, loss=loss, samples=64)
    time.sleep(0.03)
"""
NOTEBOOK = "installed.ipynb"
# the points of a rank's line in the cell's live view
LINE = """(rank) => (document.querySelector(
  `.dn-live path.dn-chart-line[data-rank='${rank}']`)?.getAttribute('d') || '')
  .split(/[ML]/).filter(Boolean).length"""


def test_the_wheel_holds_the_whole_product(dist: Dist) -> None:
    names = zipfile.ZipFile(dist.wheel).namelist()
    data = "dist_notebook-" + dist.wheel.name.split("-")[1] + ".data/data/"
    labext = data + "share/jupyter/labextensions/dist-notebook/"
    assert "dist_notebook/display/static/live.js" in names
    assert "dist_notebook/display/static/live.css" in names
    assert labext + "package.json" in names
    assert any(n.startswith(labext + "static/remoteEntry.") for n in names), names
    assert labext + "static/style.js" in names
    assert data + "etc/jupyter/jupyter_server_config.d/dist_notebook.json" in names, names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "extension/"))]
    assert "PASSED" in dist.twine and "FAILED" not in dist.twine, dist.twine


def test_the_lab_extra_keeps_the_jupyterlab_there_was(lab_env: Venv) -> None:
    # lab_env had JupyterLab OLD_LAB before `pip install 'dist-notebook[lab]'`
    assert lab_env.version("jupyterlab") == OLD_LAB
    assert lab_env.version("dist-notebook")


def notebook(root: Path, kernel: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    train = until_ended(TRAIN, root, together=True)
    cells = [PROBE, "%load_ext dist_notebook", "%dist_cluster start -n 2 --cpu", train]
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, root / NOTEBOOK)


def api(server: Server, endpoint: str) -> tuple[int, object]:
    url = f"{server.url}dist-notebook/api/{endpoint}?token={server.token}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def run_and_check(page, server: Server, kernel_env: Venv, name: str) -> None:  # type: ignore[no-untyped-def]
    """Run the notebook in chromium: the kernel is *kernel_env*'s installed package, the
    chart draws mid-run, the panel lists the cluster, the server extension answers."""
    page.goto(server.lab_url(f"lab/tree/{NOTEBOOK}"))
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel .jp-Cell")).to_have_count(4, timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=90_000)
    command(page, "notebook:run-all-cells")
    try:
        # the kernel runs the installed package of its own environment, not the checkout
        probe = cell(page, 0).locator(".jp-OutputArea-output")
        expect(probe).to_contain_text("MODULE", timeout=60_000)
        text = probe.inner_text()
        prefix = re.search(r"PREFIX (\S+)", text)
        module = re.search(r"MODULE (\S+)", text)
        assert prefix and Path(prefix.group(1)) == kernel_env.path, text
        assert module and Path(module.group(1)).is_relative_to(kernel_env.site_packages()), text
        assert str(ROOT) not in text.split("PATH", 1)[1], text

        # mid-run: the chart draws both ranks and goes on drawing
        live = cell(page, 3).locator(".dn-live")
        expect(live).to_be_visible(timeout=120_000)
        for rank in (0, 1):
            page.wait_for_function(f"({LINE})({rank}) >= 5", timeout=60_000)
        drawn = page.evaluate(f"({LINE})(0)")
        page.wait_for_function(f"({LINE})(0) > {drawn}", timeout=30_000)
        shot(page, f"install-{name}-running")

        # the side panel lists the cluster with its two ranks
        page.click(PANEL_TAB)
        panel = page.locator("#dist-notebook-panel")
        cluster = panel.locator(".dn-cluster").first
        expect(cluster).to_be_visible(timeout=60_000)
        expect(cluster.locator(".dn-rank")).to_have_count(2, timeout=30_000)
        expect(panel.locator(".dn-error")).to_be_hidden()
        shot(page, f"install-{name}-panel")

        # the server extension answers from the run store the kernel writes
        status, clusters = api(server, "clusters")
        assert status == 200 and isinstance(clusters, list) and len(clusters) == 1, clusters
        status, runs = api(server, "runs")
        assert status == 200 and [r["name"] for r in runs] == ["installed"], runs  # type: ignore[union-attr,index]
    finally:
        end_run(server.root)
    # the run ends as a user's would: succeeded in the run store, the kernel idle again
    deadline = time.monotonic() + 120
    while (state := api(server, "runs")[1][0]["state"]) == "running":  # type: ignore[index]
        assert time.monotonic() < deadline, "the run did not end"
        time.sleep(0.5)
    assert state == "succeeded", state
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)


@pytest.fixture
def one_env_lab(lab_env: Venv, tmp_path: Path, needs_chromium: None) -> Iterator[Server]:
    yield from start_lab(lab_env, tmp_path, "one-env")


def test_one_environment_chart_panel_and_server_extension(  # type: ignore[no-untyped-def]
    one_env_lab: Server, lab_env: Venv, page
) -> None:
    notebook(one_env_lab.root, "python3")
    run_and_check(page, one_env_lab, lab_env, "one-env")


@pytest.fixture
def hub_lab(
    lab_env: Venv, kernel_env: Venv, tmp_path: Path, needs_chromium: None
) -> Iterator[Server]:
    # the kernel is registered from its own environment, into a prefix the server reads
    share = kernelspec(tmp_path / "kernels", "train", kernel_env.python)
    yield from start_lab(lab_env, tmp_path, "hub", jupyter_path=share)


def test_hub_layout_server_and_kernel_in_two_environments(  # type: ignore[no-untyped-def]
    hub_lab: Server, kernel_env: Venv, page
) -> None:
    notebook(hub_lab.root, "train")
    run_and_check(page, hub_lab, kernel_env, "hub")


@pytest.fixture
def lab_without_server_extension(
    lab_env: Venv, tmp_path: Path, needs_chromium: None
) -> Iterator[Server]:
    yield from start_lab(lab_env, tmp_path, "no-serverext", without_server_extension=True)


def test_a_server_without_our_server_extension_is_named_in_one_line(  # type: ignore[no-untyped-def]
    lab_without_server_extension: Server, page
) -> None:
    server = lab_without_server_extension
    assert api(server, "clusters")[0] == 404
    page.goto(server.lab_url())
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    page.click(PANEL_TAB)
    error = page.locator("#dist-notebook-panel .dn-error")
    expect(error).to_be_visible(timeout=30_000)
    text = error.inner_text()
    assert text.startswith("This Jupyter server has no dist-notebook server extension"), text
    assert "pip install dist-notebook" in text and "restart the server" in text, text
    assert "\n" not in text.strip() and "Cannot reach" not in text, text
    shot(page, "install-no-serverext-panel")


def test_a_kernel_without_the_package_fails_load_ext_as_python_does(
    bare_kernel_env: Venv, tmp_path: Path
) -> None:
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    share = kernelspec(tmp_path / "kernels", "bare", bare_kernel_env.python)
    specs = KernelSpecManager(kernel_dirs=[str(share / "kernels")], ensure_native_kernel=False)
    km = KernelManager(kernel_name="bare", kernel_spec_manager=specs)
    km.start_kernel(cwd=str(tmp_path))
    try:
        client = km.client()
        client.start_channels()
        client.wait_for_ready(timeout=60)
        errors: list[dict] = []

        def output(msg: dict) -> None:
            if msg["msg_type"] == "error":
                errors.append(msg["content"])

        reply = client.execute_interactive(
            "%load_ext dist_notebook", timeout=60, output_hook=output
        )
        client.stop_channels()
    finally:
        km.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "error", reply
    assert reply["content"]["ename"] == "ModuleNotFoundError", reply["content"]
    assert reply["content"]["evalue"] == "No module named 'dist_notebook'", reply["content"]
    assert [e["ename"] for e in errors] == ["ModuleNotFoundError"], errors
