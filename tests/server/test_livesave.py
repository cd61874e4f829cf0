"""The pre-save hook that gives a live view saved mid-run a note state (server/livesave.py):
what it writes into a notebook, what it leaves, and that the server extension runs it on a
save through the contents API of a real Jupyter server.
"""

from __future__ import annotations

import json
from typing import Any

import nbformat

from dist_notebook.server.livesave import (
    ENDED_CLASS,
    MARK,
    NOTE_CLASS,
    WIDGET_STATE,
    WIDGET_VIEW,
    add_note_states,
    end_notes,
)
from dist_notebook.store import StoreWriter

from .conftest import DONE, RUNNING

NOTE_HTML = (
    f"<div class='{NOTE_CLASS}' data-run='r1'><b>run demo</b> (r1): live view of a run in "
    "progress; see <code>dist_notebook.load_run(&#x27;demo&#x27;)</code> for its records</div>"
)


def live_output(model_id: str, run_id: str = "r1") -> dict[str, Any]:
    return nbformat.v4.new_output(
        "display_data",
        data={
            WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": model_id},
            "text/plain": f"run demo ({run_id}): live view of a run in progress",
            "text/html": NOTE_HTML.replace("r1", run_id),
        },
    )


def notebook(*outputs: dict[str, Any]) -> dict[str, Any]:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%%dist_train\n...")
    cell.outputs = list(outputs)
    nb.cells = [cell]
    return json.loads(nbformat.writes(nb))


def states(nb: dict[str, Any]) -> dict[str, Any]:
    return nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})


def test_a_live_output_gets_a_note_state_that_anywidget_draws() -> None:
    nb = notebook(live_output("m1"))
    assert add_note_states(nb)
    state = states(nb)["m1"]
    assert state[MARK] is True
    assert state["model_module"] == "anywidget" and state["model_name"] == "AnyModel"
    assert state["state"]["_view_name"] == "AnyView"
    assert state["state"]["note"].startswith("run demo (r1): live view of a run in progress")
    assert "dist_notebook.load_run('demo')" in state["state"]["note"]  # markup and escapes gone
    assert 'model.get("note")' in state["state"]["_esm"]
    nbformat.validate(nbformat.from_dict(nb))  # still a valid notebook


def test_other_outputs_and_widgets_are_left_alone() -> None:
    other = nbformat.v4.new_output(
        "display_data",
        data={WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": "slider"}},
    )
    nb = notebook(other)
    assert not add_note_states(nb)
    assert "widgets" not in nb["metadata"]
    # a state the front end saved itself is kept as it is
    nb = notebook(live_output("m1"))
    mine = {"model_name": "AnyModel", "model_module": "anywidget", "state": {"x": 1}}
    nb["metadata"]["widgets"] = {WIDGET_STATE: {"version_major": 2, "state": {"m1": mine}}}
    add_note_states(nb)
    assert states(nb)["m1"] == mine


def test_a_state_of_ours_goes_once_its_output_is_the_picture() -> None:
    nb = notebook(live_output("m1"))
    add_note_states(nb)
    nb["cells"][0]["outputs"] = [
        nbformat.v4.new_output("display_data", data={"image/png": "iVBOR", "text/plain": "end"})
    ]
    assert add_note_states(nb)
    assert "widgets" not in nb["metadata"]


async def test_the_server_extension_runs_the_hook_on_a_save(jp_fetch, jp_root_dir) -> None:  # type: ignore[no-untyped-def]
    body = {"type": "notebook", "format": "json", "content": notebook(live_output("m1"))}
    await jp_fetch("api", "contents", "mid.ipynb", method="PUT", body=json.dumps(body))
    saved = json.loads((jp_root_dir / "mid.ipynb").read_text())
    assert states(saved)["m1"][MARK] is True


def test_a_live_output_whose_run_ended_is_saved_as_the_end_note() -> None:
    nb = notebook(live_output("m1", "r-a"), live_output("m2", "r-b"))
    asked: list[set[str]] = []

    def ended(ids):  # type: ignore[no-untyped-def]
        asked.append(set(ids))
        return {"r-a": {"id": "r-a", "name": "demo", "state": "succeeded"}}

    assert end_notes(nb, ended) == 1
    assert asked == [{"r-a", "r-b"}]  # one look-up for the notebook
    first, second = nb["cells"][0]["outputs"]
    assert WIDGET_VIEW not in first["data"]  # no widget left to say "model not found"
    assert ENDED_CLASS in first["data"]["text/html"]
    assert first["data"]["text/plain"] == (
        "run demo (r-a): ended (succeeded); see dist_notebook.load_run('demo')"
        " for its records and picture"
    )
    assert WIDGET_VIEW in second["data"]  # still running: left as it is
    add_note_states(nb)
    assert list(states(nb)) == ["m2"]
    nbformat.validate(nbformat.from_dict(nb))
    assert end_notes(notebook(nbformat.v4.new_output("stream", text="x")), ended) == 0
    assert len(asked) == 1  # no live output: the store is not read


async def test_a_save_after_the_run_ended_holds_the_end_note(  # type: ignore[no-untyped-def]
    jp_fetch, jp_root_dir, filled_store: StoreWriter
) -> None:
    content = notebook(live_output("m1", DONE), live_output("m2", RUNNING))
    body = {"type": "notebook", "format": "json", "content": content}
    await jp_fetch("api", "contents", "end.ipynb", method="PUT", body=json.dumps(body))
    saved = json.loads((jp_root_dir / "end.ipynb").read_text())
    done, running = saved["cells"][0]["outputs"]
    assert f"data-run='{DONE}' data-state='succeeded'" in "".join(done["data"]["text/html"])
    assert "load_run('warmup')" in "".join(done["data"]["text/plain"])
    assert WIDGET_VIEW not in done["data"]
    assert WIDGET_VIEW in running["data"]
    assert list(states(saved)) == ["m2"]


async def test_a_save_without_a_store_keeps_the_live_note(
    jp_fetch, jp_root_dir, store_file
) -> None:  # type: ignore[no-untyped-def]
    body = {"type": "notebook", "format": "json", "content": notebook(live_output("m1", DONE))}
    await jp_fetch("api", "contents", "mid.ipynb", method="PUT", body=json.dumps(body))
    saved = json.loads((jp_root_dir / "mid.ipynb").read_text())
    assert WIDGET_VIEW in saved["cells"][0]["outputs"][0]["data"]
    assert states(saved)["m1"][MARK] is True
