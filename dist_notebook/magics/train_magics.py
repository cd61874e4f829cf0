"""%%dist_train / %dist_train EXPR (training runs) and %dist_runs (run history)."""

from __future__ import annotations

import io
import shlex
import threading
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.display import display

from ..training import RunSpec, RunState, TrainingRun, list_runs
from ..training.run import RunResult
from .args import MagicParser, check_ranks, int_list, positive_float, positive_int
from .output import LabelledPrinter, Table
from .session import Session


def _train_parser() -> MagicParser:
    p = MagicParser("%%dist_train", description="Run the cell as a DDP training run on every rank.")
    p.add_argument("expression", nargs="*", help="line form: a call to run, e.g. train(epochs=3)")
    p.add_argument("--name", help="a name for the run (default: run-HHMMSS-xxxx)")
    p.add_argument("--steps", type=positive_int, help="total steps, for progress and ETA")
    p.add_argument("--ranks", type=int_list, help="only these ranks, e.g. 0,1")
    p.add_argument("--no-dashboard", action="store_true", help="no live widgets, text only")
    p.add_argument(
        "--background",
        action="store_true",
        help="return at once; the run goes on and the dashboard follows it",
    )
    p.add_argument("--timeout", type=positive_float, help="stop the run after this many seconds")
    p.add_argument(
        "--checkpoint-every",
        type=positive_int,
        metavar="N",
        help="save a checkpoint every N steps (use checkpointer() in the cell)",
    )
    p.add_argument("--checkpoint-dir", metavar="DIR", help="where (default: checkpoints/NAME)")
    p.add_argument("--resume", action="store_true", help="start from the latest checkpoint")
    return p


def split_flags(parser: MagicParser, line: str) -> tuple[str, str]:
    """Split a line into its leading flags and the rest, the rest exactly as typed.

    ``--name a train(tag="x y")`` gives ``("--name a ", 'train(tag="x y")')``: the
    expression keeps its quotes and spaces, which shell-style splitting would remove.
    """
    stream = io.StringIO(line)
    lexer = shlex.shlex(stream, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    wants_value = False
    while True:
        start = stream.tell()
        try:
            token = lexer.get_token()
        except ValueError:  # unbalanced quotes: parse_line reports them
            return line, ""
        if token is None:
            return line, ""
        if wants_value:
            wants_value = False
        elif token.startswith("-"):
            action = parser._option_string_actions.get(token)
            wants_value = action is not None and action.nargs != 0
        else:
            return line[:start], line[start:].strip()


@magics_class
class TrainMagics(Magics):
    def __init__(self, shell: Any, session: Session) -> None:
        super().__init__(shell)
        self.session = session
        self.parser = _train_parser()
        self.last_run: TrainingRun | None = None
        self.last_dashboard: Any = None
        self.last_result: RunResult | None = None

    @no_var_expand
    @line_cell_magic
    def dist_train(self, line: str, cell: str | None = None) -> RunResult | None:
        """Run a training cell (or, as a line magic, an expression) on every rank."""
        flags, expression = split_flags(self.parser, line)
        # {name} in the flags takes the notebook's value (--steps {total_steps}), as in
        # any magic; the expression is code for the ranks and is left as written.
        assert self.shell is not None
        args = self.parser.parse_line(self.shell.var_expand(flags))
        if cell is None:
            if not expression:
                raise UsageError(
                    "%dist_train: give a call to run, e.g. %dist_train train(epochs=3)"
                )
            code = expression
        else:
            if expression:
                raise UsageError(f"%%dist_train: unexpected {expression!r}; flags start with --")
            code = cell
        if not code.strip():
            raise UsageError("%%dist_train: the cell is empty; write the training loop in it")
        cluster = self.session.ready_cluster()
        ranks = check_ranks(args.ranks, cluster.n)
        if (args.resume or args.checkpoint_every) and not (args.name or args.checkpoint_dir):
            raise UsageError(
                "%%dist_train: checkpoints need a stable place: give --name NAME "
                "(or --checkpoint-dir DIR) so a later --resume finds them"
            )
        spec = RunSpec(
            code=code,
            name=args.name or "",
            steps=args.steps,
            ranks=tuple(ranks) if ranks else None,
            timeout=args.timeout,
            checkpoint_every=args.checkpoint_every,
            checkpoint_dir=args.checkpoint_dir,
            resume=args.resume,
        )
        run = TrainingRun(cluster, spec, writer=cluster.writer())
        dashboard = None
        if not args.no_dashboard:
            from ..display import Dashboard

            dashboard = Dashboard(run, steps=args.steps, blocking=not args.background)
            dashboard.show()
        self.last_run, self.last_dashboard = run, dashboard
        if args.background:
            thread = threading.Thread(
                target=self._execute,
                args=(run, dashboard, False),
                name=f"dist-train-{run.id}",
                daemon=True,
            )
            thread.start()
            print(f"run {run.name} ({run.id}) started in the background")
            return None
        self._execute(run, dashboard, True)
        # The end is said once, by the run's own output: no Out[] <RunResult> after it
        # (the result: magics.last_result, or dist_notebook.load_run(name)).
        return None

    def _execute(self, run: TrainingRun, dashboard: Any, raise_errors: bool) -> RunResult:
        # A blocking cell handles the live view's messages (its Stop) while it waits.
        idle = dashboard.idle if dashboard is not None and raise_errors else None
        result = run.run(sink=LabelledPrinter(), idle=idle)
        try:
            if dashboard is not None:
                dashboard.finish(result)
        finally:
            # Set last: whoever waits on last_result (a background run) sees the final picture.
            self.last_result = result
        if dashboard is None:  # else the dashboard's final picture says how the run ended
            took = result.ended - result.started
            print(
                f"run {result.name} ({result.run_id}) {result.state.value} in {took:.1f} s; "
                f"{result.records} records"
            )
        if result.state == RunState.FAILED:
            self.session.after_failure()
        if result.state == RunState.FAILED and result.error is not None and raise_errors:
            raise result.error
        return result

    @line_magic
    def dist_runs(self, line: str) -> None:
        """List the runs in the run store, newest first."""
        if line.strip():
            raise UsageError("%dist_runs takes no arguments")
        rows = []
        for r in list_runs():
            took = f"{r['ended'] - r['started']:.1f} s" if r["ended"] else "-"
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"]))
            rows.append((r["name"], r["id"], r["state"], when, took))
        display(Table(("name", "id", "state", "started", "took"), rows, "runs"))
