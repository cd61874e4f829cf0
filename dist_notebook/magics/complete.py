"""Tab and Shift-Tab in cells that run on the ranks know the ranks' names.

In a ``%%dist`` or ``%%dist_train`` cell (or any cell under ``%dist_auto on``), Tab offers
the names and attributes of rank 0's namespace (or of the first rank in ``--ranks``)
beside the kernel's own; Shift-Tab and ``obj?`` show the rank-side object's help.

One apply call asks the rank; the kernel waits for it at most ``RANK_WAIT_S``. With no
cluster, a run in progress, or a rank still busy with the last question (a cell running
there), the kernel's own answer comes at once: a completion never hangs the notebook.
An answer that misses the bound (a loaded machine) is kept for the next Tab: the same
question (or the same names with a longer prefix: the user typed on) gets it once it is
there, without a new round trip that could miss the bound again; a cell run in between
drops it (the names may have changed).
Why the ranks' part was left out (busy, no answer in time, a rank-side error) is logged
at debug level (``logging.getLogger("dist_notebook").setLevel("DEBUG")`` with a handler).

Hooks: a matcher (IPython's matcher API v2) in ``shell.Completer.custom_matchers``, and a
wrapper around the kernel's ``do_inspect`` (ipykernel has no hook for inspection).
"""

from __future__ import annotations

import inspect as pyinspect
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from IPython.core.completer import CompletionContext, SimpleCompletion, context_matcher

from ..cluster import ClusterState
from ..cluster.onranks.execute import apply_on_ranks, view_of
from ..engine import introspect
from .session import Session

log = logging.getLogger(__name__)
RANK_WAIT_S = 0.15  # the kernel's own completions follow within the 200 ms
INSPECT_WAIT_S = 1.0  # Shift-Tab: IPython's help takes a rank ~0.1-0.3 s to format
CELL_MAGICS = ("%%dist", "%%dist_train")
# The dotted name before the cursor: "model.lay" -> ("model", "lay"), "tot" -> ("", "tot").
_DOTTED = re.compile(r"((?:[A-Za-z_]\w*\.)*)([A-Za-z_]\w*)?$")
_RANKS = re.compile(r"--ranks[= ]+(\d+)")


def rank_of_cell(text: str, cursor_line: int | None, auto: bool) -> int | None:
    """The rank whose namespace a cell's code runs in (None: the cell runs in the kernel).

    *cursor_line*: the line of the cursor (None: anywhere); on the magic's own line the
    kernel's flag completion answers.
    """
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return 0 if auto else None
    head = lines[first].split()
    if head[0] in CELL_MAGICS:
        if cursor_line is not None and cursor_line <= first:
            return None
        ranks = _RANKS.search(lines[first])
        return int(ranks.group(1)) if ranks else 0
    if auto and not lines[first].lstrip().startswith("%"):
        return 0
    return None


class RankIntrospection:
    """Asks a rank for names and help on the kernel's behalf, within a bounded wait."""

    def __init__(self, session: Session, auto: Callable[[], bool] = lambda: False) -> None:
        self.session = session
        self.auto = auto
        self._pending: Any = None  # the last question, while the rank has not answered
        # (rank, fn, args) of that question when it missed its bound: the next Tab's
        self._missed: tuple[Any, ...] = ()
        self._left_out_why = ""  # the reason logged last (each keystroke asks again)
        self.waits: list[float] = []  # how long each question kept the kernel (the last 100)
        self._paged: tuple[int, ...] = ()  # the engines whose pages print (obj? in a cell)

    def ask(self, rank: int, fn: Callable[..., Any], *args: Any, wait: float = RANK_WAIT_S) -> Any:
        """``fn(*args)`` on *rank*, or None when no answer can come within *wait* s."""
        start = time.perf_counter()
        try:
            return self._ask(rank, fn, args, wait)
        finally:  # how long the kernel waited, answered or not (the last 100)
            self.waits = [*self.waits[-99:], time.perf_counter() - start]

    def _ask(self, rank: int, fn: Callable[..., Any], args: tuple[Any, ...], wait: float) -> Any:
        cluster = self.session.cluster
        if cluster is None or cluster.state != ClusterState.READY or cluster.client is None:
            return None
        if self.session.active_run(cluster) is not None or not 0 <= rank < cluster.n:
            return None
        key = (rank, fn, args)
        asked = self._missed
        # the answer that missed the last Tab's bound, there now: no new round trip
        kept = self._pending is not None and self._pending.ready() and _answers(asked, key)
        if self._pending is not None and not self._pending.ready():
            return self._left_out(f"rank {rank} is busy")  # a cell runs there: queue nothing
        if not kept:
            view = view_of(cluster.client, cluster.engine_ids([rank]))
            self._pending, self._missed, asked = view.apply_async(fn, *args), (), key
        try:
            answer = self._pending.get(timeout=wait)[0]  # a view of one engine: a list of one
        except TimeoutError:
            self._missed = asked  # its answer is the next Tab's, once it is there
            return self._left_out(f"rank {rank} did not answer within {wait} s")
        except Exception as e:
            # A rank-side failure (the name's help raised, the engine went away): a
            # completion must never fail the kernel's own, so it is logged, not raised.
            self._missed = ()
            return self._left_out(f"rank {rank}: {type(e).__name__}: {e}")
        self._left_out_why = ""
        self._missed = ()
        if asked != key and fn is introspect.names:
            answer = [n for n in answer if n.startswith(args[1])]  # typed on: a longer prefix
        return answer

    def _left_out(self, why: str) -> None:
        """Log at debug level why the rank's answer was left out (the kernel's own answer
        stands), once while the reason stays the same: each keystroke asks again."""
        if why != self._left_out_why:
            self._left_out_why = why
            log.debug("Tab/Shift-Tab answered without the ranks: %s", why)

    def matcher(self) -> Callable[[CompletionContext], Any]:
        """The matcher for ``shell.Completer.custom_matchers``."""

        @context_matcher()
        def dist_rank_matcher(context: CompletionContext) -> Any:
            empty = {"completions": [], "suppress": False}
            rank = rank_of_cell(context.full_text, context.cursor_line, self.auto())
            if rank is None:
                return empty
            match = _DOTTED.search(context.text_until_cursor)
            if match is None or not match.group(0):
                return empty
            base, prefix = match.group(1).rstrip("."), match.group(2) or ""
            found = self.ask(rank, introspect.names, base, prefix)
            if not found:
                return empty
            dotted = f"{base}." if base else ""
            completions = [SimpleCompletion(text=dotted + n, type=f"rank {rank}") for n in found]
            return {"completions": completions, "suppress": False, "matched_fragment": match[0]}

        return dist_rank_matcher

    def wrap_inspect(self, kernel: Any) -> None:
        """Make *kernel*'s Shift-Tab answer from the rank in cells that run there."""
        # A second %load_ext wraps the kernel's own method again, not our wrapper.
        original = getattr(kernel, "_dist_notebook_do_inspect", kernel.do_inspect)
        kernel._dist_notebook_do_inspect = original

        def do_inspect(
            code: str, cursor_pos: int, detail_level: int = 0, omit_sections: Any = ()
        ) -> Any:
            reply = self.inspect_reply(code, cursor_pos, detail_level)
            if reply is not None:
                return _awaitable_like(original, reply)
            return original(code, cursor_pos, detail_level, omit_sections)

        kernel.do_inspect = do_inspect

    def inspect_reply(self, code: str, cursor_pos: int, detail_level: int) -> Any:
        """The inspect_reply content from the rank, or None (the kernel answers)."""
        from IPython.utils.tokenutil import token_at_cursor

        line = code[:cursor_pos].count("\n")
        rank = rank_of_cell(code, line, self.auto())
        if rank is None:
            return None
        name = token_at_cursor(code, cursor_pos)
        bundle = None
        if name:
            bundle = self.ask(rank, introspect.inspect, name, detail_level, wait=INSPECT_WAIT_S)
        if not bundle:
            return None
        bundle.pop("text/html", None)
        return {"status": "ok", "found": True, "data": bundle, "metadata": {}}

    def before_cell(self, info: Any) -> None:
        """``pre_run_cell``: before a cell with ``obj?`` runs on the ranks, make their pages
        print (once per set of engines; an engine that replaced another gets it again)."""
        self._missed = ()  # a cell may change the names: a late answer is no one's
        cell = getattr(info, "raw_cell", "") or ""
        if "?" not in cell or rank_of_cell(cell, None, self.auto()) is None:
            return
        cluster = self.session.cluster
        if cluster is None or cluster.state != ClusterState.READY or cluster.client is None:
            return
        engines = tuple(cluster.engine_ids())
        if engines == self._paged or self.session.active_run(cluster) is not None:
            return
        apply_on_ranks(cluster, introspect.show_pages_as_output)
        self._paged = engines


def _answers(asked: tuple[Any, ...], key: tuple[Any, ...]) -> bool:
    """Whether the answer to question *asked* answers *key* too: the same question, or
    the same rank's names of the same base with a prefix that extends the one asked."""
    if asked == key:
        return True
    if len(asked) != 3 or asked[:2] != key[:2] or key[1] is not introspect.names:
        return False
    (base, prefix), (new_base, new_prefix) = asked[2][:2], key[2][:2]
    return bool(base == new_base and new_prefix.startswith(prefix))


def _awaitable_like(original: Callable[..., Any], reply: dict[str, Any]) -> Any:
    """*reply* as the kernel's own do_inspect returns it (a coroutine where it is async)."""
    if not pyinspect.iscoroutinefunction(original):
        return reply

    async def done() -> dict[str, Any]:
        return reply

    return done()


_by_shell: dict[int, RankIntrospection] = {}


def for_shell(shell: Any) -> RankIntrospection | None:
    """The shell's rank-side introspection (None before %load_ext)."""
    return _by_shell.get(id(shell))


def register(shell: Any, session: Session, auto: Callable[[], bool]) -> RankIntrospection:
    old = _by_shell.get(id(shell))
    if old is not None:  # %reload_ext: the new hooks replace the old ones
        shell.events.unregister("pre_run_cell", old.before_cell)
    rank_side = _by_shell[id(shell)] = RankIntrospection(session, auto)
    matchers = shell.Completer.custom_matchers
    matchers[:] = [m for m in matchers if getattr(m, "__name__", "") != "dist_rank_matcher"]
    matchers.append(rank_side.matcher())
    shell.events.register("pre_run_cell", rank_side.before_cell)
    kernel = getattr(shell, "kernel", None)
    if kernel is not None and hasattr(kernel, "do_inspect"):
        rank_side.wrap_inspect(kernel)
    return rank_side
