"""Pages written from the code at each build, into docs/_generated/ (ignored by git).

- ``magics.md``: every magic's own ``--help`` (the argparse parsers of
  dist_notebook/magics, built by IPython's ``magic_arguments``), so the reference cannot
  drift from what ``%dist_cluster --help`` prints;
- ``states.md``: the state machines, from ``protocol.TRANSITIONS``.

The benchmark page includes bench/results/*.md, which ``make bench`` writes.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

# (module, class) of each group of magics, in the order the reference lists them
MAGIC_CLASSES = [
    ("cluster_magics", "ClusterMagics"),
    ("exec_magics", "ExecMagics"),
    ("train_magics", "TrainMagics"),
    ("runs_magics", "RunsMagics"),
    ("export_magics", "ExportMagics"),
    ("debug_magics", "DebugMagics"),
    ("reload_magics", "ReloadMagics"),
    ("auto", "AutoMagics"),
]
PREFIX = {"line": "%", "cell": "%%"}


def magics() -> list[tuple[str, str]]:
    """(name as typed, its --help) of every magic with an argparse parser."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for module, cls_name in MAGIC_CLASSES:
        cls = getattr(importlib.import_module(f"dist_notebook.magics.{module}"), cls_name)
        for kind in ("line", "cell"):
            for name, method in cls.magics.get(kind, {}).items():
                fn = getattr(cls, method)
                parser = getattr(fn, "parser", None)
                if parser is None or method in seen:
                    # %%dist_train and %dist_train are one method: listed once
                    continue
                seen.add(method)
                kinds = [k for k in ("line", "cell") if name in cls.magics.get(k, {})]
                typed = " / ".join(PREFIX[k] + name for k in reversed(kinds))
                found.append((typed, parser.format_help()))
    return found


def magics_page() -> str:
    out = [
        "<!-- written by docs/_ext/generated.py from the magics' argparse parsers -->\n",
    ]
    for typed, text in magics():
        out.append(f"## `{typed}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(out)


def states_page() -> str:
    from dist_notebook.protocol import TRANSITIONS

    out = ["<!-- written by docs/_ext/generated.py from dist_notebook.protocol.TRANSITIONS -->\n"]
    for kind, moves in TRANSITIONS.items():
        doc = (kind.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        out.append(f"### {kind.__name__}\n\n{doc}\n")
        out.append("| state | may move to |\n|---|---|")
        for state, nxt in moves.items():
            targets = ", ".join(f"`{s.value}`" for s in sorted(nxt, key=lambda s: s.value))
            out.append(f"| `{state.value}` | {targets or '(final)'} |")
        out.append("")
    return "\n".join(out)


def write(app: Any) -> None:
    where = Path(app.srcdir) / "_generated"
    where.mkdir(exist_ok=True)
    for name, text in (("magics.md", magics_page()), ("states.md", states_page())):
        path = where / name
        if not path.exists() or path.read_text() != text:  # unchanged: no rebuild
            path.write_text(text)


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", write)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
