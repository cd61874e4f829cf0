"""IPython magics: thin adapters that parse arguments, call the API and show results."""

from __future__ import annotations

from typing import Any

from .session import Session


def register(ipython: Any) -> None:
    from .cluster_magics import ClusterMagics
    from .debug_magics import DebugMagics
    from .exec_magics import ExecMagics
    from .reload_magics import ReloadMagics
    from .runs_magics import RunsMagics
    from .train_magics import TrainMagics

    session = Session.for_shell(ipython)
    for cls in (ClusterMagics, ExecMagics, TrainMagics, DebugMagics, ReloadMagics):
        ipython.register_magics(cls(ipython, session=session))
    ipython.register_magics(RunsMagics(ipython))
    from .export_magics import register as register_export

    register_export(ipython)
    _register_completers(ipython)
    _register_rank_side(ipython, session)


def _register_rank_side(ipython: Any, session: Session) -> None:
    """%dist_auto (magics/auto.py), and Tab and Shift-Tab from the ranks in the cells that
    run there (magics/complete.py)."""
    from .auto import register as register_auto
    from .breakpoints import register as register_breakpoints
    from .complete import register as register_completion

    mode = register_auto(ipython, session)
    register_completion(ipython, session, mode.is_on)
    register_breakpoints(ipython, session, mode.is_on)


def _register_completers(ipython: Any) -> None:
    """Tab completion of each magic's subcommands and flags (``%dist_cluster st<TAB>``)."""
    from .args import completer, option_names
    from .auto import AutoMagics
    from .cluster_magics import ACTIONS, ClusterMagics
    from .debug_magics import DebugMagics
    from .exec_magics import ExecMagics
    from .export_magics import ExportMagics
    from .reload_magics import ReloadMagics
    from .runs_magics import RunsMagics
    from .train_magics import TrainMagics

    magics = {
        "%dist_cluster": (ClusterMagics.dist_cluster, ACTIONS),
        "%%dist": (ExecMagics.dist, ()),
        "%dist_pull": (ExecMagics.dist_pull, ()),
        "%%dist_train": (TrainMagics.dist_train, ()),
        "%dist_train": (TrainMagics.dist_train, ()),
        "%dist_runs": (RunsMagics.dist_runs, ()),
        "%dist_export": (ExportMagics.dist_export, ()),
        "%dist_debug": (DebugMagics.dist_debug, ()),
        "%dist_autoreload": (ReloadMagics.dist_autoreload, ("on", "off")),
        "%dist_sync": (ReloadMagics.dist_sync, ()),
        "%dist_auto": (AutoMagics.dist_auto, ("on", "off")),
    }
    for command, (magic, subcommands) in magics.items():
        words = [*subcommands, *option_names(magic.parser)]
        ipython.set_hook("complete_command", completer(words), str_key=command)
