"""Jupyter server extension: a REST API over the run store for the JupyterLab panel, and a
pre-save hook that keeps a live view saved mid-run readable later (livesave), and live
views handed out as notes to a page that has no kernel session for them (liveload)."""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "dist_notebook.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from .liveload import serve_notes
    from .livesave import pre_save
    from .manager import RunStoreManager
    from .routes import setup_routes

    manager = RunStoreManager()
    setup_routes(serverapp.web_app, manager)
    # A notebook saved mid-run opens later as the run's note, not "model not found".
    serverapp.contents_manager.register_pre_save_hook(pre_save)
    # ...and a page that opens it with no kernel session gets the note, not "Loading widget".
    serve_notes(serverapp.contents_manager, serverapp.session_manager)
    serverapp.log.info("dist-notebook: REST API over the run store at %s", manager.path)
