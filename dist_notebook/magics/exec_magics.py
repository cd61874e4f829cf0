"""%%dist, %dist_push, %dist_pull and %dist_run: code and values on every rank."""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments

from ..cluster import ClusterError
from ..cluster.onranks.execute import RankError, run_on_ranks
from ..cluster.onranks.scripts import run_script
from ..cluster.onranks.tracebacks import render
from ..cluster.onranks.transfer import pull, push
from .args import (
    HELP,
    check_ranks,
    exclusive,
    help_text,
    int_list,
    parse,
    positive_float,
    rank_number,
    strip_comment,
)
from .debug_magics import offer_debug
from .history import history_of
from .output import FoldingPrinter, LabelledPrinter, Table, show_folded_streams, show_results
from .session import Session

DIST_EXAMPLES = """
  %%dist                     run the cell on every rank
  %%dist --ranks 0           only on rank 0
  %%dist --no-stream         output at the end, identical lines folded across ranks
  %%dist --no-fold           a line per rank, even when many ranks print the same
  %%dist --timeout 60        interrupt the ranks after 60 s

debugging:
  breakpoint()               in the cell: pdb on rank 0 in the notebook (the other ranks
                             run on and wait for it in their next collective)
  breakpoint(rank=1)         pdb on rank 1 only; rank=[0, 1] or rank="all": on those
  %%dist --debug-ranks 1     breakpoint() stops rank 1 instead of rank 0
  torch.distributed.breakpoint(rank=1)   pdb on rank 1, the others wait at a barrier
  %dist_debug                after an error: pdb where the first failing rank raised
"""

PULL_EXAMPLES = """
  w = %dist_pull model.state_dict()          rank 0's value
  losses = %dist_pull loss.item() --all      {rank: value} of every rank
  x = %dist_pull x --rank 1                  rank 1's value
"""


@magics_class
class ExecMagics(Magics):
    def __init__(self, shell: Any, session: Session) -> None:
        super().__init__(shell)
        self.session = session

    @magic_arguments("%%dist")
    @HELP
    @argument(
        "--ranks",
        type=int_list,
        metavar="LIST",
        help="only these ranks, e.g. 0,2 (default: every rank)",
    )
    @argument("--no-stream", action="store_true", help="show output at the end, folded")
    @argument(
        "--no-fold",
        action="store_true",
        help="label every rank's lines apart (default: a line printed by many ranks once)",
    )
    @argument(
        "--timeout",
        type=positive_float,
        metavar="S",
        help="interrupt the ranks after this many seconds (default: none, no limit)",
    )
    @argument(
        "--debug-ranks",
        type=int_list,
        metavar="LIST",
        help="ranks whose breakpoint() stops in pdb in the notebook (default: 0)",
    )
    @help_text(DIST_EXAMPLES)
    @cell_magic
    def dist(self, line: str, cell: str) -> None:
        """Run the cell on every rank (or the listed ones), in each rank's persistent
        namespace; output streams back labelled by rank."""
        args = parse(self.dist, line)
        if args is None:
            return
        cluster = self.session.ready_cluster()
        ranks = check_ranks(args.ranks, cluster.n)
        check_ranks(args.debug_ranks, cluster.n)  # (the breakpoint relay read them already)
        fold = not args.no_fold
        sink: FoldingPrinter | LabelledPrinter | None = None
        if not args.no_stream:
            sink = FoldingPrinter(ranks or range(cluster.n)) if fold else LabelledPrinter()
        try:
            outputs = run_on_ranks(cluster, cell, ranks, sink=sink, timeout=args.timeout)
        except RankError as e:
            self.session.after_failure()
            offer_debug(e)  # the traceback's last line names %dist_debug
            if not fold:  # the traceback with a line for every other rank
                unfolded = partial(render, e.failures, e.ranks, e.hint, fold=False)
                e._render_traceback_ = unfolded  # type: ignore[method-assign]
            raise
        except ClusterError as e:
            raise UsageError(str(e)) from None
        finally:
            if sink is not None:
                sink.close()  # what is held back shows before the traceback or Out[]
        history_of(self.shell).ran_dist(cluster, cell, ranks)  # for %dist_export
        if args.no_stream:
            show_folded_streams(outputs, fold)
        show_results(outputs, fold)

    @line_magic
    def dist_push(self, line: str) -> None:
        """Send kernel variables to every rank: %dist_push model_config lr"""
        names = strip_comment(line).split()
        if not names:
            raise UsageError("%dist_push: name the variables to send, e.g. %dist_push lr config")
        assert self.shell is not None
        ns = self.shell.user_ns
        missing = [n for n in names if n not in ns]
        if missing:
            raise UsageError(
                f"%dist_push: no variable named {missing[0]!r} in the notebook; define it first"
            )
        cluster = self.session.ready_cluster()
        try:
            # A push or pull would wait for the whole background run: refused now.
            # (The run's own pulls, at its end, go on: training/iterators.py.)
            cluster.owner.refuse_during_run("cannot push to the ranks")
            push(cluster, {n: ns[n] for n in names})
        except ClusterError as e:
            raise UsageError(str(e)) from None
        history_of(self.shell).pushed(cluster, {n: ns[n] for n in names})  # for %dist_export

    @magic_arguments("%dist_pull")
    @HELP
    @argument("expression", nargs="*", help="an expression evaluated on the rank(s)")
    @exclusive(
        argument("--rank", type=rank_number, default=0, help="the rank to pull from (default: 0)"),
        argument("--all", action="store_true", help="pull from every rank: {rank: value}"),
    )
    @help_text(PULL_EXAMPLES)
    @no_var_expand
    @line_magic
    def dist_pull(self, line: str) -> Any:
        """Evaluate an expression on rank 0 (or --rank R, or --all) and return its value."""
        args = parse(self.dist_pull, line, keep_quotes=True)
        if args is None:
            return None
        if not args.expression:
            raise UsageError("%dist_pull: give an expression, e.g. x = %dist_pull model.weight")
        cluster = self.session.ready_cluster()
        expression = " ".join(args.expression)
        ranks = (
            list(range(cluster.n))
            if args.all
            else check_ranks([args.rank], cluster.n, flag="--rank")
        )
        assert ranks is not None
        try:
            cluster.owner.refuse_during_run("cannot pull from the ranks")
            values = pull(cluster, expression, ranks)
        except ClusterError as e:
            raise UsageError(str(e)) from None
        return values if args.all else values[ranks[0]]

    @line_magic
    def dist_run(self, line: str) -> None:
        """Run a torchrun-style script on every rank: %dist_run train.py --epochs 2"""
        import shlex

        try:
            words = shlex.split(strip_comment(line))
        except ValueError as e:
            raise UsageError(
                f"%dist_run: cannot read the arguments ({e}); check the quotes"
            ) from None
        if not words:
            raise UsageError("%dist_run: name a script, e.g. %dist_run train.py --epochs 2")
        path = os.path.abspath(os.path.expanduser(words[0]))
        if not os.path.isfile(path):
            raise UsageError(f"%dist_run: script not found: {words[0]} (looked in {os.getcwd()})")
        cluster = self.session.ready_cluster()
        statuses = run_script(cluster, path, words[1:], sink=LabelledPrinter())
        rows = [
            (rank, code, "ok" if code == 0 else "failed") for rank, code in sorted(statuses.items())
        ]
        print(repr(Table(("rank", "exit", "status"), rows, f"{os.path.basename(path)}")))
        failed = [r for r, c in statuses.items() if c != 0]
        if failed:
            raise UsageError(
                f"{os.path.basename(path)} failed on rank {failed[0]} "
                f"(exit {statuses[failed[0]]}); see its output above"
            )
