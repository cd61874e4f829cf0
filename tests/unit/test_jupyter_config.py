"""ipyparallel's own lab panel and server extension are off in an install of ours,
read by the real jupyter_server and jupyterlab_server config code (one cluster panel:
the browser check is tests/ui/test_one_cluster_panel.py)."""

from __future__ import annotations

import json
from pathlib import Path

from installed_config import ROOT, layout, shared_data
from jupyter_server.extension.config import ExtensionConfigManager
from jupyterlab_server.config import get_static_page_config


def test_the_install_maps_the_config_folders() -> None:
    table = shared_data()
    assert table["jupyter-config/labconfig"] == "etc/jupyter/labconfig"
    assert table["jupyter-config/server-config"] == "etc/jupyter/jupyter_server_config.d"
    ours = ROOT / "jupyter-config" / "server-config" / "ipyparallel_disabled_by_dist_notebook.json"
    # Read after ipyparallel's own ipyparallel.json in the same folder, so ours wins.
    assert sorted(["ipyparallel.json", ours.name]) == ["ipyparallel.json", ours.name]
    page = ROOT / "jupyter-config" / "labconfig" / "page_config.d" / "dist_notebook.json"
    assert json.loads(page.read_text()) == {
        "disabledExtensions": {"ipyparallel-labextension": True}
    }


def test_the_server_extension_is_off(tmp_path: Path) -> None:
    etc = layout(tmp_path)
    assert (etc / "jupyter_server_config.d" / "ipyparallel.json").exists()  # ipyparallel's on
    extensions = ExtensionConfigManager(read_config_path=[str(etc)]).get_jpserver_extensions()
    assert extensions["ipyparallel"] is False
    assert extensions["dist_notebook.server"] is True


def test_the_labextension_is_disabled(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    etc = layout(tmp_path)
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(etc))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "user"))
    page = get_static_page_config(level="all")
    assert page["disabledExtensions"]["ipyparallel-labextension"] is True
    # What `jupyter labextension enable ipyparallel-labextension` writes (README) at its
    # default level, sys_prefix (here the laid-out prefix), wins over our page_config.d.
    (etc / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"ipyparallel-labextension": False}})
    )
    page = get_static_page_config(level="all")
    assert page["disabledExtensions"]["ipyparallel-labextension"] is False
