"""Notebooks that plain Jupyter opens open with the server extension on, too: whatever
the live-view pass cannot read (odd cells, outputs or metadata, an old format) is handed
out unchanged, as jupyter_server's own contents manager reads it; never a 500."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from jupyter_server.services.contents.filemanager import FileContentsManager

from .test_livesave import live_output, notebook


def odd(kind: str) -> dict[str, Any]:
    """A notebook with one live output of ours (so the pass has work) and *kind* of oddity."""
    nb = notebook(live_output("m1", "r-gone"))
    cell = nb["cells"][0]
    if kind == "null-outputs":
        nb["cells"].append({**copy.deepcopy(cell), "outputs": None})
    elif kind == "list-data":
        cell["outputs"].append({"output_type": "display_data", "data": ["x"], "metadata": {}})
    elif kind == "string-output":
        cell["outputs"].append("not an output")
    elif kind == "html-of-numbers":
        cell["outputs"][0]["data"]["text/html"] = [1, 2, 3]
    elif kind == "null-output-metadata":
        cell["outputs"][0]["metadata"] = None
    elif kind == "null-widget-state":
        nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": None}
    elif kind == "list-of-states":
        state = {"version_major": 2, "version_minor": 0, "state": []}
        nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": state}
    elif kind == "string-cell":
        nb["cells"].append("not a cell")
    elif kind == "nbformat3":
        return {
            "nbformat": 3,
            "nbformat_minor": 0,
            "metadata": {"name": "old"},
            "worksheets": [
                {
                    "cells": [
                        {
                            "cell_type": "code",
                            "input": "1",
                            "language": "python",
                            "outputs": [{"output_type": "pyout", "text": "1", "prompt_number": 1}],
                            "prompt_number": 1,
                        }
                    ]
                }
            ],
        }
    return nb


KINDS = [
    "html-of-numbers",
    "null-output-metadata",
    "null-widget-state",
    "list-of-states",
    "nbformat3",
]


@pytest.mark.parametrize("kind", KINDS)
async def test_an_odd_notebook_is_handed_out_as_plain_jupyter_reads_it(  # type: ignore[no-untyped-def]
    jp_fetch, jp_root_dir, kind: str
) -> None:
    name = f"odd-{kind}.ipynb"
    (jp_root_dir / name).write_text(json.dumps(odd(kind)))
    plain = FileContentsManager(root_dir=str(jp_root_dir)).get(name)
    if not isinstance(plain, dict):  # a newer jupyter_server: the sync one is async too
        plain = await plain
    reply = await jp_fetch("api", "contents", name, method="GET")
    assert reply.code == 200
    ours = json.loads(reply.body)["content"]
    expected = json.loads(json.dumps(plain["content"]))
    for cells in (ours["cells"], expected["cells"]):
        for cell in cells:  # an old format's cells get random ids as they are read
            cell.pop("id", None)
    assert ours == expected, kind
