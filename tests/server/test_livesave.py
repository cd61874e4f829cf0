"""The pre-save hook that gives a live view saved mid-run a note state (server/livesave.py):
what it writes into a notebook, what it leaves, and that the server extension runs it on a
save through the contents API of a real Jupyter server.
"""

from __future__ import annotations

import json
from typing import Any

import nbformat

from dist_notebook.server.livesave import (
    MARK,
    NOTE_CLASS,
    WIDGET_STATE,
    WIDGET_VIEW,
    add_note_states,
)

NOTE_HTML = (
    f"<div class='{NOTE_CLASS}' data-run='r1'><b>run demo</b> (r1): live view of a run in "
    "progress; see <code>dist_notebook.load_run(&#x27;demo&#x27;)</code> for its records</div>"
)


def live_output(model_id: str) -> dict[str, Any]:
    return nbformat.v4.new_output(
        "display_data",
        data={
            WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": model_id},
            "text/plain": "run demo (r1): live view of a run in progress",
            "text/html": NOTE_HTML,
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
