"""The folding of rank output, apart from printing and from the clock.

A ``print`` on 64 ranks is one line for all of them (``[ranks 0-63] SUM 64``): ``Folder``
gathers the ranks' lines into groups of identical text, each rank's lines in its own
order, and says which groups may show now. ``output.FoldingPrinter`` prints them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush
from typing import Any

# How long a line waits for the same line from the other ranks. It shows as soon as
# every rank of the cell has printed as many lines; else HOLD after it came, EXTEND
# after the last rank that joined it, never more than LONGEST after it came. An engine
# sends its output up to 0.2 s after the print (ipykernel's flush interval), the kernel
# looks every 50 ms, and on a busy 2-core machine a rank may wait its turn longer: at 64
# ranks under a load of 40, a 0.5 s EXTEND left the last rank or two on a line of their
# own. A line only one rank prints (``if rank == 0: print(loss)``) shows HOLD late.
HOLD = 0.5
EXTEND = 1.0
LONGEST = 5.0


@dataclass(eq=False)
class Group:
    """One line (``text`` ends with a newline) or display, shown once for its ``ranks``."""

    kind: str  # "stdout", "stderr" or "display"
    text: str  # for a display: its content as JSON, what identical displays share
    ranks: list[int]
    order: int  # when it began: the first of equal groups is joined first
    seq: int  # a place consistent with before/after (Pearce-Kelly), to join in O(1)
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
            self._put(rank, kind, _as_shown(line), now)
        if rest:  # a line not ended yet waits for its end, at most HOLD
            self._partial[(rank, kind)] = (rest, since)

    def ready(self, now: float) -> list[Group]:
        """The groups to show now, in the order to show them."""
        for (rank, kind), (text, since) in list(self._partial.items()):
            if since + self.hold <= now:  # as next_deadline() computes it
                del self._partial[(rank, kind)]
                self._put(rank, kind, _as_shown(text), now)
        least = self._least()
        return self._take(lambda g: g.deadline <= now or g.line < least.get(g.kind, 0))

    def close(self, now: float) -> list[Group]:
        """Everything still held (the cell has ended), in the order to show it."""
        for (rank, kind), (text, _) in sorted(self._partial.items()):
            self._put(rank, kind, _as_shown(text), now)
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
            if group is not previous and (previous is None or self._may_follow(previous, group)):
                group.ranks.append(rank)
                group.line = min(group.line, line)
                group.deadline = min(group.longest, max(group.deadline, now + self.extend))
                break
        else:
            order = self._order
            self._order += 1
            deadline, longest = now + self.hold, now + self.longest
            group = Group(kind, text, [rank], order, order, line, deadline, longest, payload)
            self._waiting[group.order] = group
            self._by_text.setdefault((kind, text), []).append(group)
        if previous is not None and previous is not group:
            previous.after.add(group.order)
            group.before.add(previous.order)
        self._last[rank] = group.order

    def _may_follow(self, previous: Group, group: Group) -> bool:
        """Whether *group* may show after *previous* (it need not show before it); if so,
        the places (``seq``) are made to agree with that. Pearce and Kelly's online
        topological order: only groups placed between the two are looked at, none at all
        when ranks print alike in step (each joins the group after its previous one)."""
        if previous.seq < group.seq:
            return True
        forward, todo, seen = [], [group], {group.order}
        while todo:
            g = todo.pop()
            forward.append(g)
            for order in g.after:
                if order == previous.order:
                    return False  # group must show before previous: joining breaks the order
                nxt = self._waiting[order]
                if order not in seen and nxt.seq < previous.seq:
                    seen.add(order)
                    todo.append(nxt)
        backward, todo, seen = [], [previous], {previous.order}
        while todo:
            g = todo.pop()
            backward.append(g)
            for order in g.before:
                nxt = self._waiting[order]
                if order not in seen and nxt.seq > group.seq:
                    seen.add(order)
                    todo.append(nxt)
        moved = sorted(backward, key=_seq) + sorted(forward, key=_seq)
        for g, seq in zip(moved, sorted(g.seq for g in moved), strict=True):
            g.seq = seq
        return True

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


def _as_shown(line: str) -> str:
    """*line* (without its newline) as a terminal leaves it, with one: what follows its
    last carriage return (a progress bar's latest state), so the label stays in front."""
    body = line.rstrip("\r")
    return (body.rsplit("\r", 1)[-1] if "\r" in body else body) + "\n"


def _seq(group: Group) -> int:
    return group.seq


def _key(group: Group) -> tuple[int, int, int]:
    return (group.line, min(group.ranks), group.order)
