"""A notebook handed out with no kernel session of its own shows its live views as notes.

A live view's output names a widget model that only the kernel that ran the run holds.
Where a page opens the notebook with no kernel session ("No Kernel" picked, a copy, a
notebook opened again after its kernel ended), jupyterlab_widgets never restores a model
(it waits for a kernel: "Loading widget..." for good), or, once a new kernel starts,
finds none ("model not found", or the saved note state of ``livesave``). Nothing of ours
need run in that page for this: the server hands the notebook out with each live output
of ours as its note, without the widget's view. A run the store says ended gets the end
note (``livesave.end_notes``); the others keep the note the kernel put beside the view.

A notebook that has a session on this server is handed out as it is: that is a page
reloaded, or a second view opened, while its kernel lives, and the kernel's model draws
the live chart (or, if that kernel is not the run's, the saved note state does: for a run
the store says ended, the end's note).

jupyter_server has no load hook, so the contents manager's ``get`` is wrapped. Only an
asynchronous manager is (jupyter_server 2's default): the session list is asynchronous,
and a synchronous ``get`` is also called by its own manager's ``copy``. The pass works
on a copy: a notebook it cannot read (outputs, metadata or widget state of a shape the
schema does not allow, which Jupyter still opens) is handed out unchanged, never a 500.
"""

from __future__ import annotations

import copy
import functools
import html
import inspect
import logging
from typing import Any

from .livesave import (
    MARK,
    RUN_ID,
    WIDGET_STATE,
    WIDGET_VIEW,
    EndedRuns,
    add_note_states,
    end_notes,
    ended_bundle,
    ended_runs,
    our_views,
)

log = logging.getLogger("dist_notebook")


def as_notes(nb: dict[str, Any], ended: EndedRuns = ended_runs) -> int:
    """Each live output of ours in *nb* as its note, with no widget view left: the end's
    note where the store says the run ended, else the kernel's own note; the number of
    outputs changed."""
    changed = end_notes(nb, ended)
    for out, data, _markup in list(our_views(nb)):
        del data[WIDGET_VIEW]
        out.get("metadata", {}).pop(WIDGET_VIEW, None)
        changed += 1
    if changed:
        add_note_states(nb)  # the note states of views that are gone go too
    return changed


def end_note_states(nb: dict[str, Any], ended: EndedRuns = ended_runs) -> int:
    """The note states (``livesave``'s) of live views whose run the store says ended say
    so; the number changed. They are drawn only where the kernel lacks the model."""
    widgets = nb.get("metadata", {}).get("widgets", {})
    states = widgets.get(WIDGET_STATE, {}).get("state", {}) if isinstance(widgets, dict) else {}
    marked = {}
    for _out, data, markup in our_views(nb):
        view, run = data[WIDGET_VIEW], RUN_ID.search(markup)
        model_id = view.get("model_id") if isinstance(view, dict) else None
        state = states.get(model_id) if model_id else None
        if run and isinstance(state, dict) and state.get(MARK):
            marked[str(model_id)] = html.unescape(run.group(1))
    rows = ended(set(marked.values())) if marked else {}
    for model_id, run_id in marked.items():
        if run_id in rows:
            states[model_id]["state"]["note"] = ended_bundle(rows[run_id])["text/plain"]
    return sum(run_id in rows for run_id in marked.values())


async def has_session(sessions: Any, path: str) -> bool:
    """Whether the server's session manager holds a live session for notebook *path*."""
    wanted = path.strip("/")
    for session in await sessions.list_sessions():  # drops sessions whose kernel ended
        if str(session.get("path") or "").strip("/") == wanted:
            return True
    return False


def serve_notes(contents_manager: Any, sessions: Any) -> bool:
    """Wrap *contents_manager*'s ``get``: a notebook without a session comes with its live
    outputs as notes. False (and left as it is) for a synchronous manager."""
    get = contents_manager.get
    if not inspect.iscoroutinefunction(get):
        log.info(
            "dist-notebook: %s is synchronous; notebooks are handed out as saved",
            type(contents_manager).__name__,
        )
        return False

    @functools.wraps(get)
    async def get_with_notes(path: str, content: bool = True, *args: Any, **kwargs: Any) -> Any:
        model = await get(path, content, *args, **kwargs)
        nb = model.get("content") if isinstance(model, dict) else None
        if not isinstance(nb, dict) or model.get("type") != "notebook":
            return model
        try:
            if not any(our_views(nb)):
                return model
            nb = copy.deepcopy(nb)
            try:
                alone = not await has_session(sessions, path)
            except Exception as e:  # noqa: BLE001 - the file is still handed out, as saved
                log.warning("dist-notebook: live views left as saved (sessions: %s)", e)
                alone = False
            if alone:
                as_notes(nb)
            else:
                end_note_states(nb)
        except (AttributeError, TypeError, KeyError, ValueError) as e:
            log.warning("dist-notebook: %s handed out as saved (its live views: %r)", path, e)
            return model
        model["content"] = nb
        return model

    contents_manager.get = get_with_notes
    return True
