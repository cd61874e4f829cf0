"""Live views handed out as notes to a page with no kernel session (server/liveload.py):
what a notebook's outputs become, and that a real Jupyter server hands a notebook out so
only while no session of its own lives, with the server extension loaded.
"""

from __future__ import annotations

import json
from typing import Any

import nbformat
import pytest
from jupyter_server.services.contents.filemanager import FileContentsManager

from dist_notebook.server.liveload import as_notes, end_note_states, has_session, serve_notes
from dist_notebook.server.livesave import (
    ENDED_CLASS,
    NOTE_CLASS,
    WIDGET_VIEW,
    add_note_states,
)
from dist_notebook.store import StoreWriter

from .conftest import DONE, RUNNING
from .test_livesave import live_output, notebook, states


def slider() -> dict[str, Any]:
    return nbformat.v4.new_output(
        "display_data",
        data={WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": "slider"}},
    )


def test_each_live_view_becomes_its_note_and_other_widgets_stay() -> None:
    nb = notebook(live_output("m1", "r-a"), live_output("m2", "r-b"), slider())
    add_note_states(nb)  # as saved mid-run
    assert sorted(states(nb)) == ["m1", "m2"]

    def ended(ids):  # type: ignore[no-untyped-def]
        return {"r-a": {"id": "r-a", "name": "demo", "state": "failed"}} if "r-a" in ids else {}

    assert as_notes(nb, ended) == 2
    first, second, other = nb["cells"][0]["outputs"]
    assert WIDGET_VIEW not in first["data"] and WIDGET_VIEW not in second["data"]
    assert ENDED_CLASS in first["data"]["text/html"]  # the store says it ended: its end
    assert "ended (failed)" in first["data"]["text/plain"]
    assert NOTE_CLASS in "".join(second["data"]["text/html"])  # else the kernel's own note
    assert "live view of a run in progress" in "".join(second["data"]["text/plain"])
    assert other["data"][WIDGET_VIEW]["model_id"] == "slider"  # not ours: left as it is
    assert states(nb) == {}  # no note state left for views that are gone
    nbformat.validate(nbformat.from_dict(nb))
    assert as_notes(nb, ended) == 0  # nothing of ours left


class Sessions:
    """A session manager's list, as jupyter_server's returns it."""

    def __init__(self, *paths: str, error: Exception | None = None) -> None:
        self.paths, self.error = paths, error

    async def list_sessions(self) -> list[dict[str, Any]]:
        if self.error is not None:
            raise self.error
        return [{"id": str(i), "path": p, "type": "notebook"} for i, p in enumerate(self.paths)]


async def test_a_session_is_found_by_its_path_with_or_without_slashes() -> None:
    assert await has_session(Sessions("work/mid.ipynb"), "/work/mid.ipynb")
    assert await has_session(Sessions("/work/mid.ipynb"), "work/mid.ipynb")
    assert not await has_session(Sessions("work/other.ipynb"), "work/mid.ipynb")
    assert not await has_session(Sessions(), "mid.ipynb")


def test_a_synchronous_contents_manager_is_left_as_it_is(tmp_path) -> None:  # type: ignore[no-untyped-def]
    manager = FileContentsManager(root_dir=str(tmp_path))
    get = manager.get
    assert serve_notes(manager, Sessions()) is False
    assert manager.get == get


def put(root, name: str, *outputs: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    (root / name).write_text(json.dumps(notebook(*outputs)))


async def fetched(jp_fetch, name: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    reply = await jp_fetch("api", "contents", name, method="GET")
    return json.loads(reply.body)["content"]["cells"][0]["outputs"]


async def test_the_server_hands_out_notes_only_while_no_session_lives(  # type: ignore[no-untyped-def]
    jp_fetch, jp_root_dir, filled_store: StoreWriter
) -> None:
    # as saved while both runs went: both views, with the pre-save hook's note states
    saved = notebook(live_output("m1", DONE), live_output("m2", RUNNING))
    add_note_states(saved)
    (jp_root_dir / "mid.ipynb").write_text(json.dumps(saved))
    done, running = await fetched(jp_fetch, "mid.ipynb")
    assert WIDGET_VIEW not in done["data"] and WIDGET_VIEW not in running["data"]
    assert f"data-run='{DONE}' data-state='succeeded'" in "".join(done["data"]["text/html"])
    assert NOTE_CLASS in "".join(running["data"]["text/html"])
    on_disk = json.loads((jp_root_dir / "mid.ipynb").read_text())["cells"][0]["outputs"]
    assert all(WIDGET_VIEW in o["data"] for o in on_disk)  # the file itself is not written

    # a page reloaded while its kernel lives: the notebook has a session, and the views stay
    body = {"path": "mid.ipynb", "type": "notebook", "name": "", "kernel": {"name": "python3"}}
    reply = await jp_fetch("api", "sessions", method="POST", body=json.dumps(body))
    session = json.loads(reply.body)["id"]
    try:
        kept = await fetched(jp_fetch, "mid.ipynb")
        assert [o["data"][WIDGET_VIEW]["model_id"] for o in kept] == ["m1", "m2"]
        reply = await jp_fetch("api", "contents", "mid.ipynb", method="GET")
        noted = json.loads(reply.body)["content"]  # the note states the save put in
        assert "ended (succeeded)" in states(noted)["m1"]["state"]["note"]
        assert "in progress" in states(noted)["m2"]["state"]["note"]
    finally:
        await jp_fetch("api", "sessions", session, method="DELETE")
    gone = await fetched(jp_fetch, "mid.ipynb")  # its session ended: notes again
    assert all(WIDGET_VIEW not in o["data"] for o in gone)

    # a listing (no content) and a notebook without live views are handed out as saved
    put(jp_root_dir, "plain.ipynb", slider())
    assert (await fetched(jp_fetch, "plain.ipynb"))[0]["data"][WIDGET_VIEW]["model_id"] == "slider"
    reply = await jp_fetch("api", "contents", "mid.ipynb", method="GET", params={"content": "0"})
    assert json.loads(reply.body)["content"] is None


async def test_a_session_list_that_fails_leaves_the_views_as_saved(  # type: ignore[no-untyped-def]
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    from jupyter_server.services.contents.filemanager import AsyncFileContentsManager

    manager = AsyncFileContentsManager(root_dir=str(tmp_path))
    put(tmp_path, "mid.ipynb", live_output("m1", RUNNING))
    assert serve_notes(manager, Sessions(error=RuntimeError("database is locked")))
    model = await manager.get("mid.ipynb")
    assert WIDGET_VIEW in model["content"]["cells"][0]["outputs"][0]["data"]
    assert "live views left as saved (sessions: database is locked)" in caplog.text


def test_with_a_session_the_note_states_of_ended_runs_say_so() -> None:
    nb = notebook(live_output("m1", "r-a"), live_output("m2", "r-b"))
    add_note_states(nb)

    def ended(ids):  # type: ignore[no-untyped-def]
        return {"r-a": {"id": "r-a", "name": "demo", "state": "succeeded"}} if "r-a" in ids else {}

    assert end_note_states(nb, ended) == 1
    assert states(nb)["m1"]["state"]["note"].startswith("run demo (r-a): ended (succeeded)")
    assert "in progress" in states(nb)["m2"]["state"]["note"]
    outputs = nb["cells"][0]["outputs"]
    assert [o["data"][WIDGET_VIEW]["model_id"] for o in outputs] == ["m1", "m2"]  # kept
    # a state the front end saved itself (no mark of ours) is left as it is
    del states(nb)["m1"]["_dist_notebook_note"]
    states(nb)["m1"]["state"]["note"] = "theirs"
    assert end_note_states(nb, ended) == 0
    assert states(nb)["m1"]["state"]["note"] == "theirs"
