"""How the magics show things: rank-labelled streams, folded results, tables, progress.

At 64 ranks a ``print`` on every rank is 64 lines. ``FoldingPrinter`` prints a line once
for every rank that printed it (``[ranks 0-63] SUM 64``), lines that differ once per
content with their ranks, and stays live: a line waits at most a moment for the other
ranks' same line, then prints with the ranks seen so far. ``LabelledPrinter`` keeps one
line per rank (``%%dist --no-fold``).
"""

from __future__ import annotations

import contextvars
import html
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush
from typing import Any

from IPython.display import display, publish_display_data

from ..cluster.tracebacks import rank_label, rank_set

__all__ = ["FoldingPrinter", "Folder", "LabelledPrinter", "rank_label", "rank_set"]

TAIL_LINES = 20  # lines of each rank's output a run keeps for the panel's run tab

# How long a line waits for the same line from the other ranks. It shows as soon as
# every rank of the cell has printed as many lines; else HOLD after it came, EXTEND
# after the last rank that joined it, never more than LONGEST after it came. An engine
# sends its output up to 0.2 s after the print (ipykernel's flush interval), the kernel
# looks every 50 ms, and on a busy 2-core machine a rank may wait its turn longer. A line
# only some ranks print (``if rank == 0: print(loss)``) shows HOLD late.
HOLD = 0.5
EXTEND = 0.5
LONGEST = 3.0


class _Tails:
    """The last TAIL_LINES lines of each rank's output (``tail(rank)``), for a run's tab."""

    def __init__(self) -> None:
        self._tails: dict[int, deque[str]] = {}

    def tail(self, rank: int) -> str:
        return "".join(self._tails.get(rank, ()))

    @property
    def ranks(self) -> list[int]:
        return sorted(self._tails)

    def _keep(self, rank: int, text: str) -> None:
        lines = self._tails.setdefault(rank, deque(maxlen=TAIL_LINES))
        lines.extend(text.splitlines(keepends=True))


class LabelledPrinter(_Tails):
    """A sink for ``run_on_ranks``: prefixes every line with its rank, as it arrives."""

    def __init__(self) -> None:
        super().__init__()
        self._at_line_start: dict[tuple[int, str], bool] = {}

    def __call__(self, rank: int, kind: str, payload: Any) -> None:
        if kind == "display":
            publish_display_data(payload.get("data", {}), payload.get("metadata", {}))
            return
        self._keep(rank, str(payload))
        stream = sys.stderr if kind == "stderr" else sys.stdout
        stream.write(self._label(rank, kind, payload))
        stream.flush()

    def close(self) -> None:
        """Nothing is held back."""

    def _label(self, rank: int, kind: str, text: str) -> str:
        key = (rank, kind)
        out = []
        start = self._at_line_start.get(key, True)
        for line in text.splitlines(keepends=True):
            out.append((f"[rank {rank}] " if start else "") + line)
            start = line.endswith("\n")
        self._at_line_start[key] = start
        return "".join(out)


@dataclass(eq=False)
class Group:
    """One line (``text`` ends with a newline) or display, shown once for its ``ranks``."""

    kind: str  # "stdout", "stderr" or "display"
    text: str  # for a display: its content as JSON, what identical displays share
    ranks: list[int]
    order: int  # when it began: the first of equal groups is joined first
    line: int  # its place in its ranks' output of this kind (the lowest of them)
    deadline: float
    longest: float
    payload: Any = None  # a display's content
    before: set[int] = field(default_factory=set)  # waiting groups that must show first
    after: set[int] = field(default_factory=set)  # waiting groups that show after it


class Folder:
    """The folding of rank output, apart from printing and from the clock (``now``).

    A rank's line joins the first waiting group of the same text, unless that group
    must show before the rank's previous line (it would break the rank's order); else it
    begins a group. A group shows once every expected rank has printed as many lines
    (of its stream) as come before it, or at its deadline, and never before the groups
    holding its ranks' earlier lines. Groups that show together are ordered by place,
    then rank: ``print(rank)`` on 64 ranks reads 0, 1, ... 63 in whatever order it came.
    """

    def __init__(
        self,
        ranks: Iterable[int] | None = None,
        *,
        hold: float | None = None,
        extend: float | None = None,
        longest: float | None = None,
    ) -> None:
        self.expected = frozenset(ranks or ())  # none: a group shows at its deadline
        self.hold = HOLD if hold is None else hold
        self.extend = EXTEND if extend is None else extend
        self.longest = LONGEST if longest is None else longest
        self._waiting: dict[int, Group] = {}  # by order
        self._by_text: dict[tuple[str, str], list[Group]] = {}
        self._last: dict[int, int] = {}  # rank -> order of the group of its latest line
        self._count: dict[tuple[int, str], int] = {}  # (rank, kind) -> lines so far
        self._partial: dict[tuple[int, str], tuple[str, float]] = {}  # unended lines
        self._order = 0

    def add(self, rank: int, kind: str, payload: Any, now: float) -> None:
        """Take a rank's new output (a sink's arguments)."""
        if kind == "display":
            key = json.dumps(payload, sort_keys=True, default=str)
            self._put(rank, kind, key, now, payload)
            return
        held, since = self._partial.pop((rank, kind), ("", now))
        *lines, rest = (held + str(payload)).split("\n")
        for line in lines:
            self._put(rank, kind, line + "\n", now)
        if rest:  # a line not ended yet waits for its end, at most HOLD
            self._partial[(rank, kind)] = (rest, since)

    def ready(self, now: float) -> list[Group]:
        """The groups to show now, in the order to show them."""
        for (rank, kind), (text, since) in list(self._partial.items()):
            if now - since >= self.hold:
                del self._partial[(rank, kind)]
                self._put(rank, kind, text + "\n", now)
        least = self._least()
        return self._take(lambda g: g.deadline <= now or g.line < least.get(g.kind, 0))

    def close(self, now: float) -> list[Group]:
        """Everything still held (the cell has ended), in the order to show it."""
        for (rank, kind), (text, _) in sorted(self._partial.items()):
            self._put(rank, kind, text + "\n", now)
        self._partial.clear()
        return self._take(lambda g: True)

    def next_deadline(self) -> float | None:
        """When something held must show, if no more output comes."""
        times = [since + self.hold for _, since in self._partial.values()]
        times += [g.deadline for g in self._waiting.values() if not g.before]
        return min(times, default=None)

    def _put(self, rank: int, kind: str, text: str, now: float, payload: Any = None) -> None:
        line = self._count.get((rank, kind), 0)
        self._count[(rank, kind)] = line + 1
        previous = self._waiting.get(self._last.get(rank, -1))
        for group in self._by_text.get((kind, text), ()):
            if group is not previous and not (previous and self._reaches(group, previous)):
                group.ranks.append(rank)
                group.line = min(group.line, line)
                group.deadline = min(group.longest, max(group.deadline, now + self.extend))
                break
        else:
            group = Group(
                kind, text, [rank], self._order, line, now + self.hold, now + self.longest, payload
            )
            self._order += 1
            self._waiting[group.order] = group
            self._by_text.setdefault((kind, text), []).append(group)
        if previous is not None and previous is not group:
            previous.after.add(group.order)
            group.before.add(previous.order)
        self._last[rank] = group.order

    def _reaches(self, start: Group, goal: Group) -> bool:
        """Whether *start* must show before *goal* (a path of ranks' orders)."""
        seen, todo = set(), [start.order]
        while todo:
            order = todo.pop()
            if order == goal.order:
                return True
            if order not in seen:
                seen.add(order)
                todo += self._waiting[order].after
        return False

    def _least(self) -> dict[str, int]:
        """Per stream, the fewest lines any expected rank has printed (groups placed
        before that are complete)."""
        if not self.expected:
            return {}
        kinds = {kind for kind, _ in self._by_text}
        return {k: min(self._count.get((r, k), 0) for r in self.expected) for k in kinds}

    def _take(self, due: Callable[[Group], bool]) -> list[Group]:
        heap = [_key(g) for g in self._waiting.values() if not g.before and due(g)]
        heapify(heap)
        out = []
        while heap:
            group = self._waiting.pop(heappop(heap)[-1])
            self._by_text[(group.kind, group.text)].remove(group)
            if not self._by_text[(group.kind, group.text)]:
                del self._by_text[(group.kind, group.text)]
            out.append(group)
            for order in group.after:
                successor = self._waiting[order]
                successor.before.discard(group.order)
                if not successor.before and due(successor):
                    heappush(heap, _key(successor))
        return out


def _key(group: Group) -> tuple[int, int, int]:
    return (group.line, min(group.ranks), group.order)


class FoldingPrinter(_Tails):
    """A sink for ``run_on_ranks`` that shows each line once with the ranks that printed
    it, as the cell runs (see ``Folder``); ``close()`` shows what is still held.

    *ranks*: the ranks running the cell (a line shows as soon as all have printed it).
    Lines show from a thread of its own, a moment after output comes (the other ranks'
    output of the same poll comes with it) or at a deadline; the thread runs in the
    cell's context, so a notebook shows its output in the cell.
    """

    BATCH = 0.02  # seconds new output waits for the rest of its poll's output

    def __init__(self, ranks: Iterable[int] | None = None, *, hold: float | None = None) -> None:
        super().__init__()
        self._folder = Folder(ranks, hold=hold, extend=hold)
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._new = False
        self._closed = False

    def __enter__(self) -> FoldingPrinter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, rank: int, kind: str, payload: Any) -> None:
        if kind != "display":
            self._keep(rank, str(payload))
        with self._cv:
            self._folder.add(rank, kind, payload, time.monotonic())
            self._new = True
            if self._thread is None and not self._closed:
                run = contextvars.copy_context().run
                self._thread = threading.Thread(
                    target=run, args=(self._show_when_due,), name="dist-output", daemon=True
                )
                self._thread.start()
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._show(self._folder.close(time.monotonic()))
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _show_when_due(self) -> None:
        while True:
            with self._cv:
                due = self._folder.next_deadline()
                if not self._new and not self._closed:
                    self._cv.wait(None if due is None else max(0.0, due - time.monotonic()))
                if self._closed:
                    return
                new, self._new = self._new, False
            if new:
                time.sleep(self.BATCH)
            with self._cv:
                if self._closed:
                    return
                self._show(self._folder.ready(time.monotonic()))

    def _show(self, groups: list[Group]) -> None:
        text: dict[str, list[str]] = {"stdout": [], "stderr": []}
        for group in groups:
            if group.kind == "display":
                self._write(text)
                content = group.payload
                publish_display_data(content.get("data", {}), content.get("metadata", {}))
            else:
                text[group.kind].append(f"[{rank_label(group.ranks)}] {group.text}")
        self._write(text)

    @staticmethod
    def _write(text: dict[str, list[str]]) -> None:
        for kind, lines in text.items():
            if lines:
                stream = sys.stderr if kind == "stderr" else sys.stdout
                stream.write("".join(lines))
                stream.flush()
                lines.clear()


def fold(items: Sequence[tuple[int, str]]) -> list[tuple[list[int], str]]:
    """Group ranks whose text is identical: [(ranks, text)], in first-rank order."""
    groups: dict[str, list[int]] = {}
    for rank, text in items:
        groups.setdefault(text, []).append(rank)
    return [(ranks, text) for text, ranks in groups.items()]


def _fold_or_not(items: Sequence[tuple[int, str]], folded: bool) -> list[tuple[list[int], str]]:
    return fold(items) if folded else [([rank], text) for rank, text in items]


def show_folded_streams(outputs: Sequence[Any], folded: bool = True) -> None:
    """For --no-stream: each distinct output once, labelled with the ranks that printed it
    (*folded* False: each rank's own)."""
    for kind in ("stdout", "stderr"):
        stream = sys.stderr if kind == "stderr" else sys.stdout
        for ranks, text in _fold_or_not([(o.rank, getattr(o, kind)) for o in outputs], folded):
            if text:
                body = text if text.endswith("\n") else text + "\n"
                stream.write(f"[{rank_label(ranks)}]\n{body}")
    for o in outputs:
        for content in o.displays:
            publish_display_data(content.get("data", {}), content.get("metadata", {}))


def show_results(outputs: Sequence[Any], folded: bool = True) -> None:
    """Show each rank's value of the cell's last expression, folded when identical."""
    texts = [
        (o.rank, o.result["data"].get("text/plain", ""))
        for o in outputs
        if o.result and o.result.get("data")
    ]
    for ranks, text in _fold_or_not(texts, folded):
        print(f"Out[{rank_label(ranks)}]: {text}")


class Table:
    """A small table shown as HTML in a notebook and as text elsewhere."""

    def __init__(
        self, columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str = ""
    ) -> None:
        self.columns = list(columns)
        self.rows = [[str(v) for v in row] for row in rows]
        self.title = title

    def __repr__(self) -> str:
        widths = [
            max([len(c), *(len(r[i]) for r in self.rows)]) for i, c in enumerate(self.columns)
        ]
        line = "  ".join(c.ljust(w) for c, w in zip(self.columns, widths, strict=True))
        body = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in self.rows]
        head = [self.title] if self.title else []
        return "\n".join(head + [line] + body)

    def _repr_html_(self) -> str:
        th = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        trs = "".join(
            "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>" for r in self.rows
        )
        cap = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table class='dist-notebook-table'>{cap}<tr>{th}</tr>{trs}</table>"


class Progress:
    """One line updated in place (a display in a notebook, a stderr line in a terminal)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self._handle: Any = None

    def __call__(self, message: str) -> None:
        text = f"[{time.perf_counter() - self.t0:5.1f} s] {message}"
        if self._handle is None:
            self._handle = display({"text/plain": text}, raw=True, display_id=True)
        else:
            self._handle.update({"text/plain": text}, raw=True)
