"""%%dist_train / %dist_train EXPR (training runs) and %dist_runs (run history)."""

from __future__ import annotations

import io
import shlex
import threading
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments

from ..cluster import ClusterError
from ..export import ExportUnavailable
from ..export import check as check_exports
from ..store.recorder import record
from ..training import RunSpec, RunState, TrainingRun
from ..training.run import RunResult, checkpoint_folder
from .args import (
    HELP,
    MagicParser,
    check_ranks,
    help_text,
    int_list,
    parse,
    parser_of,
    positive_float,
    steps_count,
    strip_comment,
)
from .history import history_of
from .output import LabelledPrinter
from .session import Session

TRAIN_EXAMPLES = """
  %%dist_train --name digits --steps 200       a run with a live dashboard
  %%dist_train --background                    the cell returns at once; the run goes on
  %%dist_train --name big --checkpoint-every 50 --resume
  %dist_train train(epochs=3) --name e3        line form: a call to run on every rank
"""


def split_flags(parser: MagicParser, line: str) -> tuple[str, str]:
    """Split a line into its leading flags and the rest, the rest exactly as typed.

    ``--name a train(tag="x y")`` gives ``("--name a ", 'train(tag="x y")')``: the
    expression keeps its quotes and spaces, which shell-style splitting would remove.
    The flags end before the first word that is not a flag and that the words before it
    leave unclaimed (they parse on their own); with no such word, all is flags.
    """
    try:
        spans = _word_spans(line)
    except ValueError:  # unbalanced quotes: parse() reports them
        return line, ""
    words = [w for w, _ in spans]
    for i, (word, start) in enumerate(spans):
        if not word.startswith("-") and _parses(parser, words[:i]):
            return line[:start], line[start:].strip()
    return line, ""


def _word_spans(line: str) -> list[tuple[str, int]]:
    """Shell words of *line* with the offset where each starts."""
    stream = io.StringIO(line)
    lexer = shlex.shlex(stream, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    spans: list[tuple[str, int]] = []
    while True:
        rest = line[stream.tell() :]
        start = stream.tell() + len(rest) - len(rest.lstrip())
        token = lexer.get_token()
        if token is None:
            return spans
        spans.append((token, start))


def _parses(parser: MagicParser, words: list[str]) -> bool:
    try:
        parser.parse_args(words)
    except UsageError:
        return False
    return True


@magics_class
class TrainMagics(Magics):
    def __init__(self, shell: Any, session: Session) -> None:
        super().__init__(shell)
        self.session = session
        self.last_run: TrainingRun | None = None
        self.last_dashboard: Any = None
        self.last_result: RunResult | None = None

    @magic_arguments("%%dist_train")
    @HELP
    @argument("--name", help="a name for the run (default: run-HHMMSS-xxxx)")
    @argument(
        "--steps",
        type=steps_count,
        metavar="N",
        help="total steps, for progress and ETA (default: none, no ETA)",
    )
    @argument(
        "--ranks",
        type=int_list,
        metavar="LIST",
        help="only these ranks, e.g. 0,1 (default: every rank)",
    )
    @argument("--no-dashboard", action="store_true", help="no live widgets, text only")
    @argument(
        "--background",
        action="store_true",
        help="return at once; the run goes on and the dashboard follows it",
    )
    @argument(
        "--timeout",
        type=positive_float,
        metavar="S",
        help="stop the run after this many seconds (default: none, no limit)",
    )
    @argument(
        "--checkpoint-every",
        type=steps_count,
        metavar="N",
        help="save a checkpoint every N steps, with checkpointer() in the cell (default: none)",
    )
    @argument(
        "--checkpoint-dir", metavar="DIR", help="where checkpoints go (default: checkpoints/NAME)"
    )
    @argument("--resume", action="store_true", help="start from the latest checkpoint")
    @argument(
        "--tensorboard",
        metavar="DIR",
        help="write every rank's metrics live as TensorBoard event files under DIR"
        " (default: none; pip install 'dist-notebook[tensorboard]')",
    )
    @argument(
        "--mlflow",
        action="store_true",
        help="log the run to MLflow: MLFLOW_TRACKING_URI, else ./mlruns"
        " (pip install 'dist-notebook[mlflow]')",
    )
    @help_text(TRAIN_EXAMPLES)
    @no_var_expand
    @line_cell_magic
    def dist_train(self, line: str, cell: str | None = None) -> RunResult | None:
        """Run the cell as a DDP training run on every rank (as a line magic: a call,
        e.g. ``%dist_train train(epochs=3)``), with live metrics in the run store."""
        # A ``# comment`` after the magic is no argument (parse() drops it too).
        flags, expression = split_flags(parser_of(self.dist_train), strip_comment(line))
        # {name} in the flags takes the notebook's value (--steps {total_steps}), as in
        # any magic; the expression is code for the ranks and is left as written.
        assert self.shell is not None
        args = parse(self.dist_train, self.shell.var_expand(flags))
        if args is None:
            return None
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
        try:
            check_exports(tensorboard=args.tensorboard, mlflow=args.mlflow)
        except ExportUnavailable as e:
            raise UsageError(f"%%dist_train: {e}") from e
        cluster = self.session.ready_cluster()
        ranks = check_ranks(args.ranks, cluster.n)
        if (args.resume or args.checkpoint_every) and not (args.name or args.checkpoint_dir):
            raise UsageError(
                "%%dist_train: checkpoints need a stable place: give --name NAME "
                "(or --checkpoint-dir DIR) so a later --resume finds them"
            )
        if (args.resume or args.checkpoint_every) and args.name and not args.checkpoint_dir:
            try:  # checkpoints/NAME: a name that would put them elsewhere (../..) is refused
                checkpoint_folder(args.name)
            except ValueError as e:
                raise UsageError(f"%%dist_train: {e}") from None
        spec = RunSpec(
            code=code,
            name=args.name or "",
            steps=args.steps,
            ranks=tuple(ranks) if ranks else None,
            timeout=args.timeout,
            checkpoint_every=args.checkpoint_every,
            checkpoint_dir=args.checkpoint_dir,
            resume=args.resume,
            tensorboard=args.tensorboard,
            mlflow=args.mlflow,
            command=flags.strip(),
        )
        # A detached cluster's keeper runs it, so that it goes on without this kernel.
        run: Any = cluster.keeper_run(spec)
        if run is None:
            try:  # refused at once, in one line, before a run or its live view is made
                cluster.owner.refuse_during_run("%%dist_train: cannot start another run")
            except ClusterError as e:
                raise UsageError(str(e)) from None
            run = TrainingRun(cluster, spec, writer=cluster.writer())
        try:
            dashboard, thread = self._set_up(cluster, run, spec, args)
        except BaseException as e:
            # A set-up that failed leaves no run claiming the cluster (every later run,
            # push and pull was refused for it until a stop).
            abandon = getattr(run, "abandon", None)
            if abandon is not None:
                abandon(f"{type(e).__name__}: {e}")
            raise
        if thread is not None:
            print(f"run {run.name} ({run.id}) started in the background")
            return None
        self._execute(run, dashboard, True)
        # The end is said once, by the run's own output: no Out[] <RunResult> after it
        # (the result: magics.last_result, or dist_notebook.load_run(name)).
        return None

    def _set_up(
        self, cluster: Any, run: Any, spec: RunSpec, args: Any
    ) -> tuple[Any, threading.Thread | None]:
        """The run's live view and history; with --background, its thread, started."""
        dashboard = None
        if not args.no_dashboard:
            from ..display import Dashboard

            dashboard = Dashboard(run, steps=args.steps, blocking=not args.background)
            dashboard.show()
        self.last_run, self.last_dashboard = run, dashboard
        assert self.shell is not None
        history_of(self.shell).ran_train(cluster, spec, run)  # for %dist_export
        self.session.run = run
        if not args.background:
            return dashboard, None
        thread = threading.Thread(
            target=self._execute,
            args=(run, dashboard, False),
            name=f"dist-train-{run.id}",
            daemon=True,
        )
        thread.start()
        return dashboard, thread

    def _execute(self, run: TrainingRun, dashboard: Any, raise_errors: bool) -> RunResult:
        printer = LabelledPrinter()
        try:
            result = run.run(sink=printer)
        except BaseException:
            # Whatever ended the wait (a bug, a lost cluster): the live view must not stay
            # live with its Stop button; it shows the picture as it stands.
            if dashboard is not None:
                dashboard.finish(None)
            raise
        finally:
            for rank in printer.ranks:  # the last lines of each rank, for the run tab
                if run.cluster.detached:
                    break  # the keeper's run wrote them, as the keeper's output
                record(
                    run.cluster.writer(),
                    "add_event",
                    "output",
                    printer.tail(rank),
                    run_id=run.id,
                    rank=rank,
                )
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
        if result.lost:  # the records it lost, of which ranks (also the run's note)
            print(result.lost)
        if result.hint:
            print(result.hint)
        kept_error = getattr(run, "error", None)
        if result.state == RunState.FAILED and result.error is None and kept_error:
            print(kept_error)  # a kept run's error, as the keeper recorded it
        if result.state == RunState.FAILED:
            self.session.after_failure()
        if result.state == RunState.FAILED and result.error is not None and raise_errors:
            raise result.error
        return result
