"""Jupyter server extension: a REST API over the run store for the JupyterLab panel."""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "dist_notebook.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from .manager import RunStoreManager
    from .routes import setup_routes

    manager = RunStoreManager()
    setup_routes(serverapp.web_app, manager)
    serverapp.log.info("dist-notebook: REST API over the run store at %s", manager.path)
