"""A notebook saved while a run's live view is in it opens later as the run's note.

A live view's output holds the widget's view (``application/vnd.jupyter.widget-view+json``,
a model id) beside a text/html and text/plain note naming the run and ``load_run(...)``.
Opened later in a trusted JupyterLab where that model is gone (its kernel ended), the
widget manager's renderer picks the widget's view over the note, finds no model and shows
"Loading widget..." then "Error displaying widget: model not found"; it never falls back to
the bundle's other types. The kernel cannot change that, and the front end keeps widget
state in the notebook only where its ``saveState`` setting is on (off by default).

This pre-save hook (registered by the server extension, so it needs no labextension) puts,
for each live-view output of ours in the notebook being saved, a model state into the
notebook's widget-state metadata: an anywidget whose module draws the note. The widget
manager restores models from the kernel first, then adds the notebook's states of models
the kernel does not have: while the run's kernel lives, a reloaded page gets the live
model (the chart); once it is gone, the saved state draws the note. States of ours whose
output is no longer in the notebook (the run ended: its output became the picture) are
dropped; other widgets' states are left as they are.

A page reloaded (or opened in a second tab) mid-run holds the live output from the file,
without its display id, so the kernel's end picture cannot replace it there: saved after
the run's end, that output would still say "live view of a run in progress". So before the
states, each live output whose run the run store says ended (any state but pending or
running; a run of a kernel that is gone reads orphaned) is saved as a note that the run
ended, naming its state and ``load_run(...)``, without the widget's view: it opens as
that note everywhere, with or without a kernel or widgets. (Where the labextension runs,
the page itself puts the end's picture in first: extension/src/finalsave.ts.)

A page with no kernel session never restores a widget, saved states included; for it the
server hands the notebook out with its live views as notes (``liveload``).
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..store import StoreError, StoreReader, store_path

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
NOTE_CLASS = "dist-notebook-live-note"  # the live output's note (display/dashboard.py)
ENDED_CLASS = "dist-notebook-ended-note"  # the note of a live output whose run ended
MARK = "_dist_notebook_note"  # in the states this hook writes: the ones it may drop
# Draws the note the state carries; a model the kernel still has never gets here.
NOTE_ESM = """export default { render({ model, el }) {
  const box = document.createElement("div");
  box.className = "dist-notebook-live-note dist-notebook-saved-note";
  box.textContent = model.get("note");
  el.replaceChildren(box);
} };
"""
_TAGS = re.compile(r"<[^>]+>")
RUN_ID = re.compile(r"data-run='([^']*)'")
LIVE_STATES = ("pending", "running")
log = logging.getLogger("dist_notebook")
# run ids -> {run id: the store's row (name, state...)} of those the store says ended
EndedRuns = Callable[[Iterable[str]], dict[str, dict[str, Any]]]


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def _note(data: dict[str, Any]) -> str:
    """The note as plain text (the output's text/html without its markup)."""
    markup = _text(data.get("text/html"))
    plain = html.unescape(_TAGS.sub("", markup)).strip()
    return plain or _text(data.get("text/plain"))


def _anywidget_names() -> dict[str, str]:
    """The model and view names anywidget's front end registers (its Python side's)."""
    try:
        import anywidget
    except ImportError:  # a server without anywidget: the names of anywidget 0.9-0.11
        return {
            "_model_module": "anywidget",
            "_model_module_version": "~0.11.*",
            "_model_name": "AnyModel",
            "_view_module": "anywidget",
            "_view_module_version": "~0.11.*",
            "_view_name": "AnyView",
        }
    traits = anywidget.AnyWidget.class_traits()
    names = ("_model_module", "_model_module_version", "_model_name") + (
        "_view_module",
        "_view_module_version",
        "_view_name",
    )
    return {n: str(traits[n].default_value) for n in names}


def our_views(nb: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any], str]]:
    """(output, its data, its HTML) of each live-view output of ours in notebook *nb*: a
    widget view with the kernel's note beside it."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        for out in cell.get("outputs", []):
            data = out.get("data") or {}
            markup = _text(data.get("text/html"))
            if WIDGET_VIEW in data and NOTE_CLASS in markup:
                yield out, data, markup


def live_outputs(nb: dict[str, Any]) -> dict[str, str]:
    """model id -> note, for each live-view output of ours in notebook *nb*."""
    found = {}
    for _out, data, _markup in our_views(nb):
        view = data[WIDGET_VIEW]
        if isinstance(view, dict) and view.get("model_id"):
            found[str(view["model_id"])] = _note(data)
    return found


def ended_runs(run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The run store's rows of those of *run_ids* that ended ({} if it cannot be read)."""
    ids = set(run_ids)
    path = store_path()
    if not ids or not path.exists():
        return {}
    try:
        reader = StoreReader(path)
        try:
            rows = {run_id: reader.run(run_id) for run_id in ids}
        finally:
            reader.close()
    except StoreError as e:
        log.warning("dist-notebook: saved live views keep their note (%s)", e)
        return {}
    return {k: r for k, r in rows.items() if r is not None and r["state"] not in LIVE_STATES}


def ended_bundle(row: dict[str, Any]) -> dict[str, str]:
    """The output saved in place of a live view whose run ended: its note."""
    name, run_id, state = str(row["name"]), str(row["id"]), str(row["state"])
    text = (
        f"run {name} ({run_id}): ended ({state}); "
        f"see dist_notebook.load_run({name!r}) for its records and picture"
    )
    markup = (
        f"<div class='{ENDED_CLASS}' data-run='{html.escape(run_id)}'"
        f" data-state='{html.escape(state)}'><b>run {html.escape(name)}</b>"
        f" ({html.escape(run_id)}): ended ({html.escape(state)}); see"
        f" <code>dist_notebook.load_run({html.escape(repr(name))})</code>"
        " for its records and picture</div>"
    )
    return {"text/html": markup, "text/plain": text}


def end_notes(nb: dict[str, Any], ended: EndedRuns = ended_runs) -> int:
    """Save each live output of ours in *nb* whose run ended as the end's note; the
    number of outputs changed."""
    found = [
        (out, html.unescape(run.group(1)))
        for out, _data, markup in our_views(nb)
        if (run := RUN_ID.search(markup))
    ]
    rows = ended({run_id for _out, run_id in found}) if found else {}
    changed = 0
    for out, run_id in found:
        if run_id in rows:
            out["data"] = ended_bundle(rows[run_id])
            out.get("metadata", {}).pop(WIDGET_VIEW, None)
            changed += 1
    return changed


def add_note_states(nb: dict[str, Any]) -> bool:
    """Put a note state for each live output of ours into *nb*; True if *nb* changed."""
    outputs = live_outputs(nb)
    widgets = nb.get("metadata", {}).get("widgets", {})
    saved = widgets.get(WIDGET_STATE, {}).get("state", {}) if isinstance(widgets, dict) else {}
    stale = [
        k for k, v in saved.items() if isinstance(v, dict) and v.get(MARK) and k not in outputs
    ]
    if not outputs and not stale:
        return False
    metadata = nb.setdefault("metadata", {})
    widgets = metadata.setdefault("widgets", {})
    bundle = widgets.setdefault(WIDGET_STATE, {"version_major": 2, "version_minor": 0})
    states = bundle.setdefault("state", {})
    for model_id in stale:
        del states[model_id]
    names = _anywidget_names()
    for model_id, note in outputs.items():
        if model_id in states and not states[model_id].get(MARK):
            continue  # a state the front end saved itself (its saveState setting on)
        states[model_id] = {
            "model_name": names["_model_name"],
            "model_module": names["_model_module"],
            "model_module_version": names["_model_module_version"],
            "state": {**names, "_esm": NOTE_ESM, "_css": "", "note": note},
            MARK: True,
        }
    if not states:
        del widgets[WIDGET_STATE]
        if not widgets:
            del metadata["widgets"]
    return True


def pre_save(model: dict[str, Any], **_kwargs: Any) -> None:
    """ContentsManager pre-save hook: the notebook's live outputs of ended runs become
    the end's note; the others get their note state."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        end_notes(model["content"])
        add_note_states(model["content"])
