"""What the kernel's Tab and Shift-Tab ask of a rank: names and object help from its
namespace.

Nothing here evaluates the text the user typed: a dotted name is looked up one
attribute at a time (``model.layer.`` is ``getattr(getattr(ns["model"], "layer"))``), as
IPython's own object lookup does, and anything else (calls, subscripts) is not completed.
"""

from __future__ import annotations

import builtins
from typing import Any

_MISSING = object()


def _shell() -> Any:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not running inside an engine")
    return shell


def _resolve(ns: dict[str, Any], dotted: str) -> Any:
    """The object a dotted name names in *ns* (then builtins), or _MISSING."""
    head, *rest = dotted.split(".")
    obj = ns.get(head, getattr(builtins, head, _MISSING))
    for part in rest:
        if obj is _MISSING or not part.isidentifier():
            return _MISSING
        try:
            obj = getattr(obj, part)
        except Exception:  # a property that raises names nothing to complete
            return _MISSING
    return obj


def names(base: str, prefix: str, limit: int = 500) -> list[str]:
    """Names starting with *prefix*: of the namespace (*base* empty) or attributes of the
    object *base* names. Private names only when *prefix* starts with ``_``."""
    ns = _shell().user_ns
    if base:
        obj = _resolve(ns, base)
        if obj is _MISSING:
            return []
        try:
            pool = dir(obj)
        except Exception:  # an object whose __dir__ raises has nothing to offer
            return []
    else:
        pool = list(ns)
    private = prefix.startswith("_")
    found = sorted({n for n in pool if n.startswith(prefix) and (private or not n.startswith("_"))})
    return found[:limit]


def inspect(name: str, detail_level: int = 0) -> dict[str, Any] | None:
    """IPython's help bundle for *name* on this rank (as ``name?`` shows it), or None."""
    if not all(part.isidentifier() for part in name.split(".")):
        return None
    shell = _shell()
    try:
        bundle = shell.object_inspect_mime(name, detail_level=detail_level)
    except KeyError:
        return None
    return dict(bundle)


def _print_page(shell: Any, data: Any, start: int = 0, screen_lines: int = 0) -> None:
    """``show_in_pager`` hook: the page's text as the cell's output (a rank has no pager;
    ipyparallel drops the pager payload that ``obj?`` would otherwise make)."""
    text = data.get("text/plain", "") if isinstance(data, dict) else str(data)
    print("\n".join(text.split("\n")[start:]))


def show_pages_as_output() -> None:
    """Make ``obj?`` and other pages print on this rank (idempotent)."""
    shell = _shell()
    if getattr(shell, "_dist_notebook_pages", False):
        return
    # Before ipykernel's payload pager (priority 99): the lower number runs first.
    shell.set_hook("show_in_pager", _print_page, priority=10)
    shell._dist_notebook_pages = True
