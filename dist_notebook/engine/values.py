"""Values moved between the kernel and a rank's namespace (push and pull)."""

from __future__ import annotations

from typing import Any


def _namespace() -> dict[str, Any]:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not running inside an engine")
    return shell.user_ns


def set_values(blob: bytes) -> list[str]:
    """Bind the (cloudpickled) name -> value mapping in this rank's namespace."""
    import pickle

    values = pickle.loads(blob)  # noqa: S301 - written by our own kernel for this rank
    _namespace().update(values)
    return sorted(values)


def evaluate(expression: str) -> Any:
    """Evaluate the user's expression in this rank's namespace (as a cell would)."""
    # The expression is the user's own code, run where their cells run; nothing from
    # the kernel is evaluated here.
    return eval(compile(expression, "<dist_pull>", "eval"), _namespace())  # noqa: S307
