"""Run code on ranks: stream each rank's output as it arrives and map errors to ranks.

Cell text travels as it is through ipyparallel's ``execute`` (never spliced into
generated source). Output is labelled by torch rank, not by ipyparallel's engine id,
which differs once an engine has been replaced.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ipyparallel.error import RemoteError

from ... import privates
from ..errors import ClusterError
from .outputs import RankError, RankOutput, RanksInterrupted
from .recovery import Release, regroup

if TYPE_CHECKING:
    from ..kind import Cluster

# sink(rank, kind, payload): kind is "stdout", "stderr" (payload: text) or "display"
# (payload: a display_data content dict with "data" and "metadata").
OutputSink = Callable[[int, str, Any], None]

# Seconds between looks at new output, failures and dead ranks while a cell runs. The
# wait itself ends as soon as the reply is in, so this bounds only how late streamed
# output and a rank's death are seen; each look costs the kernel's main thread ~0.1 ms
# (a training run: 1% of a core at 0.02 s).
_POLL = 0.05
OUTPUT_WAIT_S = 2.0  # after the ranks replied, for their output to arrive


class _Stream:
    """Follows one rank's accumulated stdout/stderr and forwards what is new."""

    def __init__(self, rank: int, sink: OutputSink | None) -> None:
        self.rank = rank
        self.sink = sink
        self.offsets = {"stdout": 0, "stderr": 0}
        self.displays = 0
        self.interrupted = False  # the kernel interrupted the cell (_interrupt)

    def forward(self, md: dict[str, Any]) -> None:
        if self.sink is None:
            return
        for name in ("stdout", "stderr"):
            text = md.get(name) or ""
            start = self.offsets[name]
            if len(text) < start:  # a carriage return rewrote the line
                start = 0
            if len(text) > start:
                new = text[start:]
                if name == "stderr":
                    new = _MARKER.sub("", new)
                    if self.interrupted and not new.strip():
                        new = ""  # the blank line IPython writes around its marker
                if new:
                    self.sink(self.rank, name, new)
                self.offsets[name] = len(text)
        outputs = md.get("outputs") or []
        for content in outputs[self.displays :]:
            self.sink(self.rank, "display", content)
        self.displays = len(outputs)


# What a rank's IPython writes to stderr when its cell is interrupted: the kernel says it
# once, in one line, instead (RanksInterrupted, RankError's interrupt line).
_MARKER = re.compile(r"\n*^KeyboardInterrupt$\n?", re.M)


def view_of(client: Any, targets: list[int]) -> Any:
    """The DirectView of *client* on *targets* (engine ids), made once and reused.

    Building a view costs ~0.15 ms (traitlets), more than the rest of the magic's own
    work on an empty cell. The views live on the client, so they go with it.
    """
    views: dict[tuple[int, ...], Any] = client.__dict__.setdefault("_dist_notebook_views", {})
    key = tuple(targets)
    view = views.get(key)
    if view is None:
        view = views[key] = client[list(targets)]
    return view


def run_on_ranks(
    cluster: Cluster,
    code: str,
    ranks: list[int] | None = None,
    *,
    sink: OutputSink | None = None,
    timeout: float | None = None,
    on_submit: Callable[[dict[int, Any]], None] | None = None,
) -> list[RankOutput]:
    """Execute *code* on *ranks* (all by default) and return one RankOutput per rank.

    *sink* receives output as it arrives (None: collect only). *on_submit* receives
    {rank: future} once the cell is sent (a future is done when that rank is). Ctrl-C
    interrupts every rank. Raises RankError if any rank raised.
    """
    from .mismatch import prepare

    client = cluster.require_ready()
    targets = cluster.engine_ids(ranks)
    prepare(client, targets)  # so a collective mismatch is named in seconds
    ar = view_of(client, targets).execute(code, silent=False, block=False)
    if on_submit is not None:
        on_submit(
            {
                cluster.rank_of(eid): child
                for eid, child in zip(targets, privates.children(ar), strict=True)
            }
        )
    return follow(cluster, ar, targets, ranks, sink=sink, timeout=timeout, cell=True)


def apply_on_ranks(
    cluster: Cluster,
    fn: Callable[..., Any],
    *args: Any,
    ranks: list[int] | None = None,
    sink: OutputSink | None = None,
    timeout: float | None = None,
    degraded_ok: bool = False,
) -> list[RankOutput]:
    """Call ``fn(*args)`` on *ranks*; each RankOutput's ``value`` is that rank's return.

    *degraded_ok*: also when a rank has died (for clean-up on the survivors).
    """
    client = cluster.require_client() if degraded_ok else cluster.require_ready()
    targets = cluster.engine_ids(ranks)
    ar = view_of(client, targets).apply_async(fn, *args)
    return follow(cluster, ar, targets, ranks, sink=sink, timeout=timeout)


class PromptClock:
    """Time a rank spent stopped at a pdb prompt in the notebook (``breakpoint()``): a
    cell's ``--timeout`` does not count it, and the collective watch does not look while
    a prompt is open (the stopped rank is in no collective, its peers may wait in one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._since = 0.0
        self._total = 0.0

    def begin(self) -> None:
        with self._lock:
            if self._open == 0:
                self._since = time.monotonic()
            self._open += 1

    def end(self) -> None:
        with self._lock:
            self._open = max(0, self._open - 1)
            if self._open == 0:
                self._total += time.monotonic() - self._since

    def open(self) -> bool:
        return self._open > 0

    def total(self) -> float:
        """Seconds at a prompt so far, the one open now included."""
        with self._lock:
            ongoing = time.monotonic() - self._since if self._open else 0.0
            return self._total + ongoing


PROMPTS = PromptClock()


def follow(
    cluster: Cluster,
    ar: Any,
    targets: list[int],
    ranks: list[int] | None,
    *,
    sink: OutputSink | None = None,
    timeout: float | None = None,
    cell: bool = False,
) -> list[RankOutput]:
    """Wait for *ar*, forwarding output as it comes; Ctrl-C interrupts the ranks.

    *cell*: *ar* runs a cell in the ranks' default group, whose collectives are watched
    for a mismatch (a script's run makes a group of its own, with other ports).
    """
    from .mismatch import Watch

    streams = [_Stream(cluster.rank_of(eid), sink) for eid in targets]
    deadline = None if timeout is None else time.monotonic() + timeout
    at_prompt = PROMPTS.total()  # the time at a pdb prompt from here on extends the deadline
    release = Release(cluster, ar, targets)
    watch = Watch(cluster, ar, targets, active=cell)
    died_at: float | None = None
    try:
        while not ar.wait(_POLL):
            _forward(ar, streams)
            failure = getattr(cluster, "failure", None)
            if failure is not None:  # the controller died: no reply will ever come
                raise ClusterError(failure)
            release.check()
            if not PROMPTS.open():
                watch.check()
            dead = release.dead()
            if dead:
                died_at = died_at or time.monotonic()
                # Survivors see "connection reset" (~1 s on gloo); free them if they do not.
                if time.monotonic() - died_at > 2:
                    release.release()
                if release.survivors_done(dead) or time.monotonic() - died_at > 10:
                    _forward(ar, streams)
                    cluster.mark_dead(dead)
                    raise _died(cluster, ar, streams, dead)
            held = PROMPTS.total() - at_prompt
            if deadline is not None and time.monotonic() - held > deadline:
                _interrupt(cluster, ar, ranks, release, streams)
                if release.released:  # the group was torn down to free a blocked rank
                    regroup(cluster)
                raise TimeoutError(
                    f"the cell ran longer than {timeout} s; interrupted every rank"
                    + absent_ranks_hint(cluster, ranks)
                )
    except KeyboardInterrupt:
        _interrupt(cluster, ar, ranks, release, streams)
        if release.released:
            regroup(cluster)
        finished = [
            s.rank
            for md, s in zip(privates.metadata(ar), streams, strict=True)
            if md.get("status") == "ok"
        ]
        interrupted = [s.rank for s in streams if s.rank not in finished]
        raise RanksInterrupted(interrupted, finished, cluster.state.value) from None
    # Returns as soon as every rank's output is in; the bound grows with the ranks (64
    # fresh ranks on a loaded 2-core machine sent theirs after the 2 s this used to wait).
    ar.wait_for_output(min(OUTPUT_WAIT_S + 0.1 * len(targets), 10.0))
    _forward(ar, streams)
    dead = release.dead() or _lost(ar, streams)
    if dead:
        cluster.mark_dead(dead)
        raise _died(cluster, ar, streams, dead)
    try:
        outputs = _collect(ar, streams)
    except RankError as e:
        if _timed_out(e) and watch.finding is None:
            e.add_hint(absent_ranks_hint(cluster, ranks))
        if cluster.client is not None:
            regroup(cluster)
        e.state = cluster.state.value
        if watch.finding is not None:
            raise watch.error(e) from None
        raise
    if watch.finding is not None:  # every rank caught its error: still say what was wrong
        regroup(cluster)
        raise watch.error(None)
    return outputs


def absent_ranks_hint(cluster: Cluster, ranks: list[int] | None) -> str:
    """For a cell on some ranks only: which ranks a collective in it waited for."""
    if ranks is None:
        return ""
    absent = [r for r in range(cluster.n) if r not in ranks]
    if not absent:
        return ""
    names = ",".join(str(r) for r in absent)
    return (
        f"; rank{'s' if len(absent) > 1 else ''} {names} {'were' if len(absent) > 1 else 'was'} "
        f"not in this cell (--ranks {','.join(str(r) for r in ranks)}): a collective (all_reduce, "
        "barrier, broadcast, DDP) waits for every rank of its group until the timeout; run "
        "it on every rank"
    )


def _timed_out(error: RankError) -> bool:
    text = " ".join(f"{f.error.ename} {f.error.evalue}" for f in error.failures if f.error)
    return any(sign in text.lower() for sign in ("timed out", "timeout", "deadline"))


def _interrupt(
    cluster: Cluster, ar: Any, ranks: list[int] | None, release: Release, streams: list[_Stream]
) -> None:
    """SIGINT every rank; free those still blocked in a collective with an idle one."""
    for stream in streams:
        stream.interrupted = True
    cluster.interrupt(ranks)
    if not ar.wait(1):
        release.release()
    # A SIGINT that reaches a rank before it begins the cell is ignored (a kernel ignores
    # it between cells), and that rank would then run the whole cell while the next one
    # waits for it: interrupt the ranks still running again, for a bounded time.
    end = time.monotonic() + 10
    while not ar.wait(0.5) and time.monotonic() < end:
        running = [
            s.rank for c, s in zip(privates.children(ar), streams, strict=True) if not c.done()
        ]
        if running:
            cluster.interrupt(running)
    _forward(ar, streams)


def _died(cluster: Cluster, ar: Any, streams: list[_Stream], dead: dict[int, str]) -> RankError:
    """The error of a call during which ranks died: the dead ranks first, then the rest."""
    info = {r.rank: r for r in cluster.ranks}
    failures = []
    for rank, how in sorted(dead.items()):
        r = info.get(rank)
        where = f"pid {r.pid}, host {r.host}" if r else "unknown process"
        message = f"rank {rank} ({where}) died: {how}; run %dist_cluster restart to replace it"
        failures.append(RankOutput(rank=rank, error=RemoteError("RankDied", message, "")))
    for md, child, stream in zip(
        privates.metadata(ar), privates.children(ar), streams, strict=True
    ):
        # The reply can be in before its error is in the metadata: take either.
        error = md.get("error")
        if error is None and child.done() and isinstance(child.exception(), RemoteError):
            error = child.exception()
        if stream.rank not in dead and error is not None:
            failures.append(RankOutput(rank=stream.rank, error=error))
    return RankError(failures, [s.rank for s in streams])


def _lost(ar: Any, streams: list[_Stream]) -> dict[int, str]:
    """Ranks ipyparallel declared dead (engines of remote launchers, missed heartbeats)."""
    from ipyparallel.error import EngineError

    lost = {}
    for child, stream in zip(privates.children(ar), streams, strict=True):
        if child.done() and isinstance(child.exception(), EngineError):
            lost[stream.rank] = "its engine stopped responding"
    return lost


def _forward(ar: Any, streams: list[_Stream]) -> None:
    for md, stream in zip(privates.metadata(ar), streams, strict=True):
        stream.forward(md)


def _collect(ar: Any, streams: list[_Stream]) -> list[RankOutput]:
    outputs = []
    for index, (md, stream) in enumerate(zip(privates.metadata(ar), streams, strict=True)):
        out = RankOutput(
            rank=stream.rank,
            stdout=md.get("stdout") or "",
            stderr=md.get("stderr") or "",
            result=md.get("execute_result"),
            displays=list(md.get("outputs") or []),
            error=md.get("error"),
            completed=_timestamp(md.get("completed"), index),
        )
        outputs.append(out)
    # An error IPython does not publish (a UsageError: a mistyped %magic in the cell) is
    # only in the reply, not in the metadata: take it from there, so it is a RankError
    # like any other and never ipyparallel's CompositeError.
    values = ar.get(return_exceptions=True)
    for out, value in zip(outputs, values, strict=True):
        if isinstance(value, RemoteError):
            out.error = out.error or value
        else:
            out.value = value
    failures = sorted((o for o in outputs if o.error is not None), key=lambda o: o.completed)
    if failures:
        raise RankError(failures, [o.rank for o in outputs])
    return outputs


def _timestamp(completed: Any, index: int) -> float:
    """When a rank finished (seconds), so the first rank to raise is shown first."""
    if hasattr(completed, "timestamp"):
        return float(completed.timestamp())
    if isinstance(completed, str):
        from datetime import datetime

        try:
            return datetime.fromisoformat(completed.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return float(index)
    return float(index)
