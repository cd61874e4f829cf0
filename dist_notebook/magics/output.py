"""How the magics show things: rank-labelled streams, folded results, tables, progress."""

from __future__ import annotations

import html
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from IPython.display import display, publish_display_data

TAIL_LINES = 20  # lines of each rank's output a run keeps for the panel's run tab


class LabelledPrinter:
    """A sink for ``run_on_ranks``: prefixes every line with its rank, and keeps the last
    TAIL_LINES lines of each rank's output (``tail(rank)``)."""

    def __init__(self) -> None:
        self._at_line_start: dict[tuple[int, str], bool] = {}
        self._tails: dict[int, deque[str]] = {}

    def tail(self, rank: int) -> str:
        return "".join(self._tails.get(rank, ()))

    @property
    def ranks(self) -> list[int]:
        return sorted(self._tails)

    def __call__(self, rank: int, kind: str, payload: Any) -> None:
        if kind == "display":
            publish_display_data(payload.get("data", {}), payload.get("metadata", {}))
            return
        lines = self._tails.setdefault(rank, deque(maxlen=TAIL_LINES))
        lines.extend(str(payload).splitlines(keepends=True))
        stream = sys.stderr if kind == "stderr" else sys.stdout
        stream.write(self._label(rank, kind, payload))
        stream.flush()

    def _label(self, rank: int, kind: str, text: str) -> str:
        key = (rank, kind)
        out = []
        start = self._at_line_start.get(key, True)
        for line in text.splitlines(keepends=True):
            out.append((f"[rank {rank}] " if start else "") + line)
            start = line.endswith("\n")
        self._at_line_start[key] = start
        return "".join(out)


def rank_label(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ",".join(map(str, ranks))


def fold(items: Sequence[tuple[int, str]]) -> list[tuple[list[int], str]]:
    """Group ranks whose text is identical: [(ranks, text)], in first-rank order."""
    groups: dict[str, list[int]] = {}
    for rank, text in items:
        groups.setdefault(text, []).append(rank)
    return [(ranks, text) for text, ranks in groups.items()]


def show_folded_streams(outputs: Sequence[Any]) -> None:
    """For --no-stream: each distinct output once, labelled with the ranks that printed it."""
    for kind in ("stdout", "stderr"):
        stream = sys.stderr if kind == "stderr" else sys.stdout
        for ranks, text in fold([(o.rank, getattr(o, kind)) for o in outputs]):
            if text:
                body = text if text.endswith("\n") else text + "\n"
                stream.write(f"[{rank_label(ranks)}]\n{body}")
    for o in outputs:
        for content in o.displays:
            publish_display_data(content.get("data", {}), content.get("metadata", {}))


def show_results(outputs: Sequence[Any]) -> None:
    """Show each rank's value of the cell's last expression, folded when identical."""
    texts = [
        (o.rank, o.result["data"].get("text/plain", ""))
        for o in outputs
        if o.result and o.result.get("data")
    ]
    for ranks, text in fold(texts):
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
