"""How the magics show things: rank-labelled streams, folded results, tables, progress.

At 64 ranks a ``print`` on every rank is 64 lines. ``FoldingPrinter`` prints a line once
for every rank that printed it (``[ranks 0-63] SUM 64``), lines that differ once per
content with their ranks, and stays live: a line waits at most a moment for the other
ranks' same line, then prints with the ranks seen so far (the folding itself:
folding.py). ``LabelledPrinter`` keeps one line per rank (``%%dist --no-fold``).
"""

from __future__ import annotations

import contextvars
import html
import math
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from typing import Any

from IPython.display import display, publish_display_data

from ..cluster.onranks.tracebacks import rank_label, rank_set
from .folding import Folder, Group

__all__ = ["FoldingPrinter", "LabelledPrinter", "rank_label", "rank_set"]

TAIL_LINES = 20  # lines of each rank's output a run keeps for the panel's run tab


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
        self._folder = Folder(ranks, hold=hold, extend=None if hold is None else 2 * hold)
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
        """Show what is held; the thread ends by itself (the cell need not wait for it)."""
        with self._cv:
            self._closed = True
            self._show(self._folder.close(time.monotonic()))
            self._cv.notify()

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


BY_NODE_BEYOND = 8  # ranks beyond which the status table has a row per node


class NodesTable(Table):
    """The table of nodes; in a notebook each node's ranks cell opens to its ranks
    (a ``<details>`` of rank, host, pid, device, state), as the side panel's node rows."""

    def __init__(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        title: str,
        members: Sequence[Sequence[Any]],
    ) -> None:
        super().__init__(columns, rows, title)
        self.members = [list(m) for m in members]

    def _repr_html_(self) -> str:
        th = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        at = self.columns.index("ranks")
        trs = []
        for row, members in zip(self.rows, self.members, strict=True):
            inner = "".join(
                "<tr>"
                + "".join(
                    f"<td>{html.escape(str(v))}</td>"
                    for v in (m.rank, m.host, m.pid, m.device, m.state)
                )
                + "</tr>"
                for m in members
            )
            cells = [f"<td>{html.escape(v)}</td>" for v in row]
            cells[at] = (
                f"<td><details><summary>{html.escape(row[at])}</summary>"
                "<table class='dist-notebook-table'><tr><th>rank</th><th>host</th>"
                f"<th>pid</th><th>device</th><th>state</th></tr>{inner}</table>"
                "</details></td>"
            )
            trs.append(f"<tr data-node='{html.escape(row[0])}'>{''.join(cells)}</tr>")
        cap = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table class='dist-notebook-table'>{cap}<tr>{th}</tr>{''.join(trs)}</table>"


def nodes_table(
    ranks: Sequence[Any],
    title: str,
    times: dict[int, float | None] | None = None,
    stragglers: Iterable[int] = (),
) -> NodesTable:
    """One row per node (RankInfos grouped by ``node_rank``): its hosts, its ranks written
    compactly, their devices and backend, how many ranks are in each state, the rarest
    first (``1 dead, 7 idle``: what needs a look leads), and with *times* (a run's
    ``compute_time`` by rank, from its summary) the node's slowest rank, marked when it
    is the run's straggler."""
    slow = set(stragglers)
    by_node: dict[int, list[Any]] = {}
    for r in ranks:
        by_node.setdefault(r.node_rank, []).append(r)
    rows = []
    for node, members in sorted(by_node.items()):
        states = Counter(m.state for m in members)
        row = [
            node,
            ",".join(sorted({m.host for m in members})),
            rank_set(m.rank for m in members),
            len(members),
            _devices(m.device for m in members),
            ",".join(sorted({m.backend for m in members if m.backend})),
            ", ".join(f"{n} {state}" for state, n in sorted(states.items(), key=_rarest)),
        ]
        if times is not None:
            row.append(_slowest([m.rank for m in members], times, slow))
        rows.append(row)
    columns = ["node", "host", "ranks", "count", "devices", "backend", "states"]
    if times is not None:
        columns.append("slowest")
    return NodesTable(columns, rows, title, [m for _, m in sorted(by_node.items())])


def _slowest(members: list[int], times: dict[int, float | None], slow: set[int]) -> str:
    """The rank of *members* with the most time (``7``, ``7 straggler``), or ``-``."""
    known = [(t, r) for r in members if (t := times.get(r)) is not None and math.isfinite(t)]
    if not known or (len(members) > 1 and len({t for t, _ in known}) == 1):
        return "-"  # nothing yet, or ranks all alike (lockstep, none waited for)
    rank = max(known, key=lambda tr: (tr[0], -tr[1]))[1]
    return f"{rank} straggler" if rank in slow else str(rank)


def _rarest(item: tuple[str, int]) -> tuple[int, str]:
    return item[1], item[0]


def _devices(devices: Iterable[str]) -> str:
    """``cuda:0-7`` for a node's GPUs, ``cpu`` for its CPU ranks."""
    names = sorted(set(devices))
    indexed = [d.partition(":") for d in names]
    kinds = {kind for kind, _, _ in indexed}
    if len(kinds) == 1 and all(i.isdigit() for _, _, i in indexed):
        return f"{kinds.pop()}:{rank_set(int(i) for _, _, i in indexed)}"
    return ",".join(names)


class Progress:
    """One line of a cell's work, updated in place, that ends with the work.

    In a notebook the line is a display: ``finish(final)`` replaces it by the work's final
    output (the start cell's table: its saved output holds only that); a line not finished
    is removed (its display updated to nothing) when its cell ends, whatever ended it (a
    rank's error, an interrupt, a Stop), so no cell keeps a transient line. A message while
    no cell runs (a background thread's, between cells) shows nowhere: its display would
    land in whichever cell ran last. A message in a later cell than the line's (a process
    group re-made under a later cell) starts a line of its own there, timed from its first
    message. Outside IPython (a script) each message is printed as it comes."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self._said = False  # no message yet: the clock starts at the first
        self._handle: Any = None
        self._lock = threading.Lock()
        self._cells = _CellWatch.of_shell()
        self._cell: int | None = self._cells.running if self._cells is not None else None

    def __call__(self, message: str) -> None:
        with self._lock:
            cells = self._cells
            cell = cells.running if cells is not None else None
            if cells is not None and cell is None:
                return  # no cell runs: nowhere to show it (see the class's docstring)
            if cell != self._cell or not self._said:
                # Timed from the work's first message, as the cluster's "ready in" is from
                # its start: the line never reads more than the result it ends in.
                self._handle, self._cell, self.t0 = None, cell, time.perf_counter()
                self._said = True
            text = f"[{time.perf_counter() - self.t0:5.1f} s] {message}"
            if self._handle is not None:
                self._handle.update({"text/plain": text}, raw=True)
                return
            self._handle = display({"text/plain": text}, raw=True, display_id=True)
            if cells is not None and self._handle is not None:
                cells.at_end(cell, self._ended)

    def finish(self, final: Any) -> None:
        """Show *final* (a displayable object) in place of this cell's line, or below."""
        with self._lock:
            cells = self._cells
            here = self._handle is not None and (cells is None or cells.running == self._cell)
            handle, self._handle = self._handle, None
        if here:
            handle.update(final)
        else:
            display(final)

    def _ended(self) -> None:
        """Its cell ended: a line still shown goes (the work ended with the cell)."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            handle.update({}, raw=True)


class _CellWatch:
    """Which cell runs now (a serial, None between cells) and what ends with it, from
    IPython's ``pre_run_cell`` / ``post_run_cell`` events; one per shell."""

    _watches: dict[int, _CellWatch] = {}

    def __init__(self, shell: Any) -> None:
        self._lock = threading.Lock()
        self._serial = 0
        # Made inside a cell (a magic's): that cell runs now.
        self.running: int | None = self._serial
        self._ends: list[tuple[int, Any]] = []
        shell.events.register("pre_run_cell", self._pre_run_cell)
        shell.events.register("post_run_cell", self._post_run_cell)

    @classmethod
    def of_shell(cls) -> _CellWatch | None:
        """The running IPython shell's watch (made on first use), or None outside IPython."""
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None or not hasattr(shell, "events"):
            return None
        watch = cls._watches.get(id(shell))
        if watch is None:
            watch = cls._watches[id(shell)] = cls(shell)
        return watch

    def at_end(self, cell: int | None, fn: Any) -> None:
        """Call *fn* when cell *cell* ends (at once if it is over)."""
        with self._lock:
            if cell is not None and cell == self.running:
                self._ends.append((cell, fn))
                return
        fn()

    def _pre_run_cell(self, _info: Any) -> None:
        with self._lock:
            self._serial += 1
            self.running = self._serial

    def _post_run_cell(self, _result: Any) -> None:
        with self._lock:
            ended, self._ends, self.running = self._ends, [], None
        for _cell, fn in ended:
            fn()
