"""Name a collective mismatch within seconds instead of the group's timeout.

A rank that skips a collective its peers call (``if rank == 0: dist.all_reduce(t)``)
leaves the cell while the others wait in it; a rank that calls another op at the same
place (a broadcast where the others all-reduce) leaves every rank waiting. Either is
silent for the group's timeout (30 s), then gloo's bare "Timed out waiting".

While a cell runs, ``Watch.check`` asks the ranks where they are, on the engines'
control thread (``dist_notebook.engine.collectives``; it answers while a cell blocks
the main thread): each rank's collective counter per group and the collective its
main thread is in. A mismatch is certain when a rank waits in collective #n of a group
that a rank which has left the cell never reached, or when two ranks wait in the same
collective #n with different ops. The ranks' transport connections are then shut
down (the waiting ones fail at once with "connection closed"), the cell's error says
who waits where and who left after what, and the caller re-creates the group, as
after any rank error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import privates
from ...engine import collectives
from .outputs import RankError, RankOutput

if TYPE_CHECKING:
    from ..kind import Cluster

SETTLE = 0.3  # seconds after a rank has left the cell before the first look
LOOK_EVERY = 0.5  # seconds between looks while some ranks have left
BUSY_FIRST = 1.0  # seconds into a cell before the first look while every rank runs
BUSY_EVERY = 1.0  # seconds between looks while every rank runs
REPLY_WAIT = 3.0  # seconds a look may stay unanswered before it is given up
# The last look reads the flight recorder (0.1-0.5 s a rank on a busy 2-core machine; over
# 3 s under two CPU hogs in CI, when the finding lost its ops): it may take this long.
FINAL_WAIT = 10.0
FIX = (
    "every rank must call the same collectives in the same order (a collective under "
    "`if rank == ...` needs the same call on the other ranks)"
)


class CollectiveMismatch(RankError):
    """Ranks disagreed on the collectives of a cell; the message says which and where."""

    def __init__(self, failures: list[RankOutput], ranks: list[int], text: str) -> None:
        super().__init__(failures, ranks)
        self.hint = text
        self.args = (text,)

    def _render_traceback_(self) -> list[str]:
        # The finding first; then where the waiting ranks were (their tracebacks).
        return [self.hint, *super()._render_traceback_()]


def prepare(client: Any, targets: list[int]) -> None:
    """Install the control-thread answer on engines that do not have it yet.

    Sent without waiting, before the cell: it runs first on each engine (one queue per
    engine), once per engine of this client.
    """
    installed: set[int] = client.__dict__.setdefault("_dist_notebook_collectives", set())
    missing = [t for t in targets if t not in installed]
    if missing:
        client[missing].apply_async(collectives.install)
        installed.update(missing)


def installed(client: Any, targets: list[int]) -> bool:
    return set(targets) <= client.__dict__.get("_dist_notebook_collectives", set())


@dataclass
class _Look:
    futures: dict[int, Any]  # rank -> future of the control reply
    sent: float
    history: bool


class Watch:
    """Looks at the ranks of one running call; ``finding`` is set once a mismatch is."""

    def __init__(self, cluster: Cluster, ar: Any, targets: list[int], active: bool = True) -> None:
        self.cluster = cluster
        self.ar = ar
        self.targets = targets
        client = cluster.client
        self.active = active and client is not None and installed(client, targets)
        self.ranks = [cluster.rank_of(t) for t in targets]
        self.started = time.monotonic()
        self.left: dict[int, float] = {}  # rank -> when we saw it leave the cell
        self.look: _Look | None = None
        self.next_look = self.started + BUSY_FIRST
        self.previous: dict[int, dict[str, Any]] = {}
        self.finding: str | None = None

    def check(self) -> None:
        """Called at each poll of the call; cheap unless a look is due."""
        if not self.active or self.finding is not None:
            return
        now = time.monotonic()
        children = privates.children(self.ar)
        for rank, child in zip(self.ranks, children, strict=True):
            if child.done() and rank not in self.left:
                self.left[rank] = now
                self.next_look = min(self.next_look, now + SETTLE)
        if len(self.left) == len(self.ranks):
            return
        if any(_failed(privates.metadata(self.ar)[self.ranks.index(r)]) for r in self.left):
            return  # a rank raised: recovery.Release frees the others
        if self.look is not None:
            self._read(now)
        elif now >= self.next_look:
            self._send(history=False)
            self.next_look = now + (LOOK_EVERY if self.left else BUSY_EVERY)

    def _send(self, history: bool, sever: list[int] | None = None) -> _Look | None:
        client = self.cluster.client
        if client is None:
            return None
        content: dict[str, Any] = {"history": 8 if history else 0}
        if sever is not None:
            content["sever"] = sever
        futures = {
            rank: privates.send_control_request(client, [eid], collectives.REQUEST, content)
            for rank, eid in zip(self.ranks, self.targets, strict=True)
        }
        self.look = _Look(futures, time.monotonic(), history)
        return self.look

    def _read(self, now: float) -> None:
        look = self.look
        assert look is not None
        if not all(f.done() for f in look.futures.values()):
            if now - look.sent > REPLY_WAIT:
                self.look = None  # a rank's control thread is busy: look again later
            return
        self.look = None
        shots = _snapshots(look.futures)
        text = find(shots, self.previous, self.left)
        self.previous = shots
        if text is None:
            return
        # Certain: ask once more, with the flight recorder's ops, and free every rank.
        ports = sorted(getattr(self.cluster, "pair_ports", ()))
        final = self._send(history=True, sever=ports)
        detail = shots
        if final is not None:
            end = time.monotonic() + FINAL_WAIT
            while time.monotonic() < end and not all(f.done() for f in final.futures.values()):
                time.sleep(0.02)
            if all(f.done() for f in final.futures.values()):
                detail = _merge(shots, _snapshots(final.futures))
            self.look = None
        self.finding = find(detail, {}, self.left, lag=self._lag()) or text

    def _lag(self) -> dict[int, float]:
        now = time.monotonic()
        return {rank: now - when for rank, when in self.left.items()}

    def error(self, raised: RankError | None) -> CollectiveMismatch:
        """The cell's error: the waiting ranks' failures, under the finding."""
        assert self.finding is not None
        if raised is not None:
            return CollectiveMismatch(raised.failures, raised.ranks, self.finding)
        from ipyparallel.error import RemoteError

        waiting = [r for r in self.ranks if r not in self.left] or self.ranks[:1]
        failure = RankOutput(
            rank=waiting[0], error=RemoteError("CollectiveMismatch", self.finding, "")
        )
        return CollectiveMismatch([failure], self.ranks, self.finding)


def _failed(md: dict[str, Any]) -> bool:
    return md.get("error") is not None or md.get("status") == "error"


def _snapshots(futures: dict[int, Any]) -> dict[int, dict[str, Any]]:
    shots = {}
    for rank, future in futures.items():
        try:
            replies = future.result()
        except Exception as e:  # the engine went away: it says nothing
            shots[rank] = {"why": f"no answer: {e}"}
            continue
        reply = replies[0] if isinstance(replies, list) else replies
        shots[rank] = dict(reply["content"].get("snapshot") or {})
    return shots


def _merge(first: dict[int, dict[str, Any]], later: dict[int, dict[str, Any]]) -> dict:
    """The first look's positions (before the sever) with the later look's ops."""
    merged = {}
    for rank, shot in first.items():
        merged[rank] = dict(shot, ops=later.get(rank, {}).get("ops", {}))
    return merged


def find(
    shots: dict[int, dict[str, Any]],
    previous: dict[int, dict[str, Any]],
    left: dict[int, float],
    lag: dict[int, float] | None = None,
) -> str | None:
    """What is wrong, from one look at every rank, or None when nothing is certain yet.

    *previous*: the look before (an op mismatch between running ranks must be seen
    twice, unchanged, to be certain); *left*: the ranks that have left the cell.
    """
    for rank, shot in sorted(shots.items()):
        waiting = shot.get("waiting")
        if rank in left or not waiting:
            continue
        group = waiting["group"]
        seq = int(shot.get("seq", {}).get(group, 0))
        members = shot.get("groups", {}).get(group, sorted(shots))
        label = _group_label(group, shot, members)
        what = waiting["op"] + (f", {waiting['line']}" if waiting.get("line") else "")
        where = f"rank {rank} waits in collective #{seq} ({what}) of {label}"
        for other in members:
            theirs = shots.get(other)
            if other == rank or not theirs or "seq" not in theirs:
                continue
            their_seq = int(theirs["seq"].get(group, 0))
            if other in left and their_seq < seq:
                after = _after(theirs, group, their_seq)
                when = f" ({lag[other]:.1f} s earlier)" if lag and other in lag else ""
                return (
                    f"collective mismatch: {where}, which rank {other} never called: rank "
                    f"{other} left the cell {after}{when}; {FIX}. The group was re-made; "
                    "every rank keeps its variables"
                )
            their_wait = theirs.get("waiting")
            if (
                other not in left
                and their_wait
                and their_wait["group"] == group
                and their_seq == seq
                and their_wait["op"] != waiting["op"]
                and _same_as_before(previous, rank, other, group, seq)
            ):
                elsewhere = f"rank {other} waits in #{seq} as {their_wait['op']}"
                if their_wait.get("line"):
                    elsewhere += f" ({their_wait['line']})"
                return (
                    f"collective mismatch: {where}, but {elsewhere}: the same collective "
                    f"with different ops never completes; {FIX}. The group was re-made; "
                    "every rank keeps its variables"
                )
    return None


def _same_as_before(
    previous: dict[int, dict[str, Any]], rank: int, other: int, group: str, seq: int
) -> bool:
    for r in (rank, other):
        before = previous.get(r) or {}
        if int(before.get("seq", {}).get(group, -1)) != seq or not before.get("waiting"):
            return False
    return True


def _after(shot: dict[str, Any], group: str, seq: int) -> str:
    if seq <= 0:
        return "before any collective of this group"
    ops = (shot.get("ops") or {}).get(group) or {}
    op = ops.get(str(seq)) or ops.get(seq)  # JSON made the numbers strings
    return f"after collective #{seq}" + (f" ({op})" if op else "")


def _group_label(group: str, shot: dict[str, Any], members: list[int]) -> str:
    if group == shot.get("default"):
        return "the default group"
    return f"group {group} (ranks {','.join(str(r) for r in members)})"
