"""The folding of rank output, apart from printing and from the clock.

A ``print`` on 64 ranks is one line for all of them (``[ranks 0-63] SUM 64``): ``Folder``
gathers the ranks' lines into groups of identical text, each rank's lines in its own
order, and says which groups may show now. ``output.FoldingPrinter`` prints them.

The cost is linear in the output: a rank's line looks only at the groups of its text it
has not looked at before (a cursor per rank and text), the order check between groups
is paid from a credit that each line adds to, and what waits is bounded (MAX_GROUPS
groups, MAX_CHARS characters): past that, the earliest half shows at once.
"""

from __future__ import annotations

import json
from bisect import bisect_right
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

# What may wait at most: past either bound the earliest half of what waits shows now,
# folded with the ranks seen so far (a Group is ~0.5 KB: 30,000 are ~15 MB, beside the
# text). 10,000 lines of every rank still fold when the ranks' output comes together.
MAX_GROUPS = 30_000
MAX_CHARS = 8_000_000
# The order check (Pearce-Kelly) looks at the groups placed between two groups, which a
# rank far ahead makes many: each line adds CREDIT_PER_LINE looks to spend, at most
# MAX_CREDIT saved (~0.1 s of work); with none left a line begins a group of its own
# (always correct, only less folded). Ranks printing alike in step spend one look a line.
CREDIT_PER_LINE = 64
MAX_CREDIT = 200_000


@dataclass(eq=False, slots=True)
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
    shown: bool = False


class _Same:
    """The groups of one text, by ``order`` (shown ones are dropped lazily), and per
    rank the last order it has looked at: groups up to there it can never join (its
    own, or ones that must show before its latest line: that stays so while they wait)."""

    __slots__ = ("groups", "orders", "live", "looked")

    def __init__(self) -> None:
        self.groups: list[Group] = []
        self.orders: list[int] = []
        self.live = 0
        self.looked: dict[int, int] = {}

    def add(self, group: Group) -> None:
        self.groups.append(group)
        self.orders.append(group.order)
        self.live += 1

    def drop(self) -> None:
        """One of the groups has shown; compact once most have."""
        self.live -= 1
        if len(self.groups) > 32 and 2 * self.live < len(self.groups):
            self.groups = [g for g in self.groups if not g.shown]
            self.orders = [g.order for g in self.groups]


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
        self._roots: dict[int, Group] = {}  # the waiting groups with nothing before them
        self._by_text: dict[tuple[str, str], _Same] = {}
        self._last: dict[int, int] = {}  # rank -> order of the group of its latest line
        self._count: dict[tuple[int, str], int] = {}  # (rank, kind) -> lines so far
        self._partial: dict[tuple[int, str], tuple[str, float]] = {}  # unended lines
        self._order = 0
        self._chars = 0  # the text waiting
        self._credit = 0  # looks left for the order checks
        self._spilled: list[Group] = []  # shown early (over the bounds), not yet handed out

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
        if len(rest) > MAX_CHARS:  # an endless line: show what came, as a line
            self._put(rank, kind, _as_shown(rest), now)
        elif rest:  # a line not ended yet waits for its end, at most HOLD
            self._partial[(rank, kind)] = (rest, since)

    def ready(self, now: float) -> list[Group]:
        """The groups to show now, in the order to show them."""
        for (rank, kind), (text, since) in list(self._partial.items()):
            if since + self.hold <= now:  # as next_deadline() computes it
                del self._partial[(rank, kind)]
                self._put(rank, kind, _as_shown(text), now)
        least = self._least()
        out, self._spilled = self._spilled, []
        return out + self._take(lambda g: g.deadline <= now or g.line < least.get(g.kind, 0))

    def close(self, now: float) -> list[Group]:
        """Everything still held (the cell has ended), in the order to show it."""
        for (rank, kind), (text, _) in sorted(self._partial.items()):
            self._put(rank, kind, _as_shown(text), now)
        self._partial.clear()
        out, self._spilled = self._spilled, []
        return out + self._take(lambda g: True)

    def next_deadline(self) -> float | None:
        """When something held must show, if no more output comes."""
        if self._spilled:
            return 0.0
        times = [since + self.hold for _, since in self._partial.values()]
        times += [g.deadline for g in self._roots.values()]
        return min(times, default=None)

    def _put(self, rank: int, kind: str, text: str, now: float, payload: Any = None) -> None:
        line = self._count.get((rank, kind), 0)
        self._count[(rank, kind)] = line + 1
        self._credit = min(MAX_CREDIT, self._credit + CREDIT_PER_LINE)
        previous = self._waiting.get(self._last.get(rank, -1))
        same = self._by_text.get((kind, text))
        if same is None:
            same = self._by_text[(kind, text)] = _Same()
        group = self._join(same, rank, previous)
        if group is not None:
            group.ranks.append(rank)
            group.line = min(group.line, line)
            group.deadline = min(group.longest, max(group.deadline, now + self.extend))
        else:
            order = self._order
            self._order += 1
            deadline, longest = now + self.hold, now + self.longest
            group = Group(kind, text, [rank], order, order, line, deadline, longest, payload)
            self._waiting[order] = self._roots[order] = group
            same.add(group)
            self._chars += len(text)
        same.looked[rank] = group.order
        if previous is not None and previous is not group:
            previous.after.add(group.order)
            group.before.add(previous.order)
            self._roots.pop(group.order, None)
        self._last[rank] = group.order
        if len(self._waiting) > MAX_GROUPS or self._chars > MAX_CHARS:
            self._spill()

    def _join(self, same: _Same, rank: int, previous: Group | None) -> Group | None:
        """The first group of *same* that *rank* has not looked at and may join."""
        at = bisect_right(same.orders, same.looked.get(rank, -1))
        while at < len(same.groups) and self._credit > 0:
            group = same.groups[at]
            at += 1
            if group.shown:
                continue
            self._credit -= 1
            same.looked[rank] = group.order
            if previous is None or self._may_follow(previous, group):
                return group
        return None

    def _may_follow(self, previous: Group, group: Group) -> bool:
        """Whether *group* may show after *previous* (it need not show before it); if so,
        the places (``seq``) are made to agree with that. Pearce and Kelly's online
        topological order: only groups placed between the two are looked at, none at all
        when ranks print alike in step (each joins the group after its previous one).
        No credit left: False, nothing changed (the line begins a group of its own)."""
        if previous.seq < group.seq:
            return True
        if group is previous:
            return False
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
            self._credit -= 1
            if self._credit <= 0:
                return False
        backward, todo, seen = [], [previous], {previous.order}
        while todo:
            g = todo.pop()
            backward.append(g)
            for order in g.before:
                nxt = self._waiting[order]
                if order not in seen and nxt.seq > group.seq:
                    seen.add(order)
                    todo.append(nxt)
            self._credit -= 1
            if self._credit <= 0:
                return False
        moved = sorted(backward, key=_seq) + sorted(forward, key=_seq)
        for g, seq in zip(moved, sorted(g.seq for g in moved), strict=True):
            g.seq = seq
        return True

    def _spill(self) -> None:
        """Over the bounds: the earliest half of what waits (by place, so never a group
        before one that must show first) shows at the next ``ready``."""
        seqs = sorted(g.seq for g in self._waiting.values())
        cut = seqs[len(seqs) // 2]
        self._spilled += self._take(lambda g: g.seq <= cut)

    def _least(self) -> dict[str, int]:
        """Per stream, the fewest lines any expected rank has printed (groups placed
        before that are complete)."""
        if not self.expected:
            return {}
        kinds = {kind for _, kind in self._count}
        return {k: min(self._count.get((r, k), 0) for r in self.expected) for k in kinds}

    def _take(self, due: Callable[[Group], bool]) -> list[Group]:
        heap = [_key(g) for g in self._roots.values() if due(g)]
        heapify(heap)
        out = []
        while heap:
            order = heappop(heap)[-1]
            group = self._waiting.pop(order)
            del self._roots[order]
            group.shown = True
            self._chars -= len(group.text)
            key = (group.kind, group.text)
            same = self._by_text[key]
            same.drop()
            if not same.live:
                del self._by_text[key]
            out.append(group)
            for later in group.after:
                successor = self._waiting[later]
                successor.before.discard(order)
                if not successor.before:
                    self._roots[later] = successor
                    if due(successor):
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
