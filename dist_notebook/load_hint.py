"""The dist magics before ``%load_ext dist_notebook``: each says to load the extension.

Without this, ``%%dist_train`` in a kernel that has not loaded the extension gets
IPython's "Cell magic `%%dist_train` not found", which names no fix (IPython has no hook
for a missing magic). The package installs ``etc/ipython/ipython_kernel_config.py`` into
the environment (pyproject's shared-data; IPython reads ``sys.prefix/etc/ipython``), which
adds this module to every kernel's ``extra_extensions``: it registers a stand-in for each
magic, and ``%load_ext dist_notebook`` then replaces them with the real ones. It imports
nothing but IPython's error type, so a kernel's start does not pay for it.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError

# Each magic of dist_notebook.magics, with the kind IPython registers it as.
MAGICS = {
    "dist_cluster": "line",
    "dist": "cell",
    "dist_train": "line_cell",
    "dist_push": "line",
    "dist_pull": "line",
    "dist_run": "line",
    "dist_runs": "line",
    "dist_debug": "line",
    "dist_autoreload": "line",
    "dist_sync": "line",
    "dist_export": "line",
    "dist_auto": "line",
}
KINDS = {"line": ("line",), "cell": ("cell",), "line_cell": ("line", "cell")}


def message(name: str, cell: bool) -> str:
    prefix = "%%" if cell else "%"
    return (
        f"{prefix}{name} is a dist-notebook magic and the extension is not loaded in this "
        "kernel: run %load_ext dist_notebook first (once per kernel)"
    )


def _stand_in(name: str) -> Any:
    def magic(line: str, cell: str | None = None) -> None:
        raise UsageError(message(name, cell is not None))

    magic.__name__ = name
    magic.__doc__ = f"Needs the extension: run %load_ext dist_notebook, then %{name}?"
    return magic


def load_ipython_extension(ipython: Any) -> None:
    """Register the stand-ins, except for magics already there (the real ones, when a
    config loaded dist_notebook itself first)."""
    have = ipython.magics_manager.magics
    for name, kind in MAGICS.items():
        if any(name in have[k] for k in KINDS[kind]):
            continue
        ipython.register_magic_function(_stand_in(name), magic_kind=kind, magic_name=name)
