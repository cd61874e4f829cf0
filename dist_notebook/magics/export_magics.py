"""%dist_export PATH [--sbatch ...]: the notebook's ranks' cells as a torchrun script."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .args import HELP, help_text, parse, positive_int
from .history import history_of

EXAMPLES = """
  %dist_export train.py                      the script: torchrun --standalone ... train.py
  %dist_export train.py --sbatch             and train.sbatch (srun + torchrun)
  %dist_export train.py --sbatch --nodes 2 --gpus-per-node 4 --partition gpu --time 2:00:00
  %dist_export train.py --name digits-long   the batch run's name in %dist_runs
"""


def _gpus(text: str) -> int:
    if text == "0":
        return 0
    return positive_int(text)


@magics_class
class ExportMagics(Magics):
    @magic_arguments("%dist_export")
    @HELP
    @argument("path", nargs="?", help="the script to write, e.g. train.py")
    @argument(
        "--name",
        help="the batch run's name in the run store (default: the training's --name, else"
        " the script's name)",
    )
    @argument("--force", action="store_true", help="overwrite the files if they exist")
    @argument(
        "--sbatch", action="store_true", help="also write PATH's .sbatch file (srun + torchrun)"
    )
    @argument(
        "--nodes",
        type=positive_int,
        metavar="N",
        help="sbatch: nodes (default: the Slurm cluster's --nodes, else 1)",
    )
    @argument(
        "--gpus-per-node",
        type=_gpus,
        metavar="G",
        help="sbatch: GPUs per node (default: the cluster's, else none)",
    )
    @argument(
        "--procs-per-node",
        type=positive_int,
        metavar="P",
        help="sbatch: ranks per node (default: G with GPUs, else the ranks over the nodes)",
    )
    @argument("--partition", help="sbatch: the partition (default: the Slurm cluster's)")
    @argument(
        "--time", dest="time_limit", metavar="LIMIT", help="sbatch: the time limit, e.g. 2:00:00"
    )
    @argument("--account", help="sbatch: the account to charge (default: the Slurm cluster's)")
    @help_text(EXAMPLES)
    @line_magic
    def dist_export(self, line: str) -> None:
        """Write the %%dist cells the ranks ran and the last %%dist_train cell as one
        torchrun script (and, with --sbatch, a Slurm job); its run is recorded in the run
        store beside the notebook's."""
        args = parse(self.dist_export, line)
        if args is None:
            return
        from ..batch.export import ExportError, Options, export, summary
        from ..store import store_path

        options = Options(
            path=args.path,
            name=args.name,
            force=args.force,
            sbatch=args.sbatch,
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            procs_per_node=args.procs_per_node,
            partition=args.partition,
            time_limit=args.time_limit,
            account=args.account,
        )
        history = history_of(self.shell)
        try:
            done = export(
                history.entries, history.last_train(), options, str(store_path().resolve())
            )
        except ExportError as e:
            raise UsageError(f"%dist_export: {e}") from None
        for text in summary(done):
            print(text)


def register(shell: Any) -> None:
    history_of(shell)  # from now on: the cell ids of the cells that run
    shell.register_magics(ExportMagics(shell))
