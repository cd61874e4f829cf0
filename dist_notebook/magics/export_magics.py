"""%dist_export PATH [--sbatch ...] [--ray-job ...]: the notebook's ranks' cells as a
torchrun script (and a Slurm job, a Ray job)."""

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
  %dist_export train.py --ray-job            and train.rayjob.yaml: prints its ray job submit
  %dist_export train.py --ray-job --address http://head:8265 --gpus-per-node 4
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
        "--ray-job",
        action="store_true",
        help="also write PATH's .rayjob.yaml (a Ray job's runtime env) and print the"
        " ray job submit command that runs the script on one Ray node",
    )
    @argument(
        "--address",
        metavar="URL",
        help="ray-job: the Ray job server, http://HEAD:8265 (default: the dashboard of the"
        " Ray cluster this kernel is connected to)",
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
        help="sbatch, ray-job: GPUs per node (default: the cluster's, else none)",
    )
    @argument(
        "--procs-per-node",
        type=positive_int,
        metavar="P",
        help="sbatch, ray-job: ranks per node (default: G with GPUs, else the ranks over the"
        " nodes)",
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
        torchrun script (and, with --sbatch, a Slurm job; with --ray-job, a Ray job); its
        run is recorded in the run store beside the notebook's."""
        args = parse(self.dist_export, line)
        if args is None:
            return
        from ..batch import rayjob
        from ..batch.export import ExportError, Options, export, summary
        from ..store import store_path

        if args.address and not args.ray_job:
            raise UsageError("%dist_export: --address names the Ray job server: add --ray-job")
        # --nodes, --gpus-per-node, --procs-per-node shape the sbatch file, or else the
        # Ray job (export() refuses them with neither).
        shaping = args.sbatch or not args.ray_job
        options = Options(
            path=args.path,
            name=args.name,
            force=args.force,
            sbatch=args.sbatch,
            nodes=args.nodes if shaping else None,
            gpus_per_node=args.gpus_per_node if shaping else None,
            procs_per_node=args.procs_per_node if shaping else None,
            partition=args.partition,
            time_limit=args.time_limit,
            account=args.account,
        )
        history = history_of(self.shell)
        train, store = history.last_train(), str(store_path().resolve())
        try:
            want = None
            if args.ray_job and args.path and train is not None:  # (else export() says)
                want = rayjob.wanted(
                    args.path,
                    train.engines,
                    args.address,
                    args.nodes,
                    args.gpus_per_node,
                    args.procs_per_node,
                    args.force,
                )
            done = export(history.entries, train, options, store)
            job = rayjob.write(want, store, done.values) if want is not None else None
        except ExportError as e:
            raise UsageError(f"%dist_export: {e}") from None
        for text in summary(done):
            print(text)
        if job is not None:
            for text in rayjob.summary(job):
                print(text)


def register(shell: Any) -> None:
    history_of(shell)  # from now on: the cell ids of the cells that run
    shell.register_magics(ExportMagics(shell))
