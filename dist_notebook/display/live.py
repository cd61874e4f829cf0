"""The live view's kernel side: an anywidget whose ESM and CSS ship inside this package,
and a feed that sends it only new records, batched.

Why anywidget: its front end loads the widget's module from the kernel (the ``_esm``
trait), so the chart draws in JupyterLab 4, Notebook 7, VS Code, Colab and marimo, with or
without this package's labextension (which still holds the side panel). The module is
built from the same chart sources as the panel (extension/src/chart, ``npm run
build:live``, part of ``make ext-build``) into ``static/live.js`` and ``static/live.css``.
The kernel draws nothing while the run goes: every ``FLUSH_EVERY`` s the feed sends the
records that came in (one custom comm message, ``contracts.RecordsMessage``: ``{"kind":
"records", "records": [Record.to_json()...], "summary": RunSummary.to_json(), "clock":
kernel time}``). Past
``MAX_POINTS`` records of a rank, each batch is sent as a min/max envelope per bucket of
records, so a long run costs the browser a bounded number of points and spikes stay
visible. A model that appears later (a reloaded page) says ``{"kind": "hello"}`` and
gets the whole history, thinned the same way, with ``reset``. At the end the ``final``
trait carries the static picture, which every open view shows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import anywidget
from traitlets import Bool, Dict, Float, Int, Unicode

from ..contracts import RecordsMessage
from ..metrics import RunMetrics
from ..metrics.thinning import MAX_POINTS, ThinnedLog, envelope, stride_for, thin
from ..protocol import Record, RunSummary

STATIC = Path(__file__).resolve().parent / "static"
# Seconds between batches: the chart changes up to ~7 times a second. The wait for the
# next batch is most of report()-to-drawn once the run goes (bench/live_view.py: a record
# reaches the feed ~30 ms after report(), p95 ~50 ms). 0.1 s took ~30 ms off the p95 but
# cost the kernel 0.8-1.4% of a core against a 1% target.
FLUSH_EVERY = 0.15
# What the feed sends whatever the rank count (64 ranks x 200 records/s sent as they came
# were 2.2 MB/s to the browser): points a second, with a second's worth as a burst. Past
# it, a rank's new records go as one min/max envelope, and past two points a rank per
# flush, the ranks take turns (the others' records wait, and go as an envelope later).
POINTS_PER_S = 1000
# The summary (one row a rank) goes with every flush up to this many ranks, then less
# often: at most this many rank rows a second.
SUMMARY_RANKS_PER_S = 64 / 0.5
# A late view's history: a rank's thinned records up to MAX_POINTS, and at most this many
# for all ranks together.
HISTORY_POINTS = 8 * MAX_POINTS
# What a checkout whose front end was never built shows in place of the chart.
UNBUILT_ESM = """export default { render({ model, el }) {
  el.textContent = `${model.get("name")}: the live chart is not built ` +
    "(run `make ext-build` in the dist-notebook checkout); the picture comes at the end.";
} };
"""


def asset(name: str) -> str | None:
    """The text of a built front-end file in static/, or None if it was not built."""
    try:
        return (STATIC / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


class LiveRunWidget(anywidget.AnyWidget):
    """The model of the cell's live view (drawn by extension/src/chart/widget.ts); its
    synced traits are contracts.LiveTraits (tests/unit/test_contracts.py checks)."""

    _esm = asset("live.js") or UNBUILT_ESM
    _css = asset("live.css") or ""
    name = Unicode("").tag(sync=True)
    run_id = Unicode("").tag(sync=True)
    state = Unicode("pending").tag(sync=True)
    steps = Int(None, allow_none=True).tag(sync=True)
    started = Float(0.0).tag(sync=True)
    rank_states = Dict().tag(sync=True)
    stoppable = Bool(True).tag(sync=True)
    # The end's picture and table (final.final_html): every open view shows it.
    final = Unicode("").tag(sync=True)


class LiveFeed:
    """Sends a run's new records and summary to a LiveRunWidget every FLUSH_EVERY s.

    ``cpu`` is the CPU time (s) the feed has used in the kernel, on any thread.
    """

    def __init__(
        self,
        widget: LiveRunWidget,
        metrics: RunMetrics,
        summary: Callable[[], RunSummary],
        flush_every: float = FLUSH_EVERY,
    ) -> None:
        self.widget = widget
        self.metrics = metrics
        self.summary = summary
        self.flush_every = flush_every
        self.cpu = 0.0
        self.messages = 0
        self.points = 0
        self._pending: list[Record] = []
        self._sent: dict[int, int] = {}  # records of each rank that reached the feed
        # Records held back by the point budget, per rank, the longest waiting first.
        self._waiting: dict[int, list[Record]] = {}
        # Every record so far, thinned as it comes: what a late view's history is made of.
        cap = min(MAX_POINTS, max(2, HISTORY_POINTS // max(1, len(metrics.ranks))))
        self._logs: dict[int, ThinnedLog] = {r: ThinnedLog(cap) for r in metrics.ranks}
        self._history_cap = cap
        for rank in metrics.ranks:  # records the metrics had before the feed (an attach)
            for rec in metrics.records(rank):
                self._logs[rank].add(rec)
        self._tokens = float(POINTS_PER_S)
        self._filled = time.monotonic()
        self._summary_at = 0.0
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._stopped = threading.Event()
        self._dirty = threading.Event()
        metrics.subscribe(self._on_records)
        self._thread = threading.Thread(target=self._loop, name="dist-notebook-live", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _on_records(self, records: list[Record]) -> None:
        # On the collector's thread: only hand the records over.
        t = time.thread_time()
        with self._lock:
            self._pending.extend(records)
        self.cpu += time.thread_time() - t

    def touch(self) -> None:
        """Send the summary at the next flush even without new records (a state change)."""
        self._dirty.set()

    def _loop(self) -> None:
        while not self._stopped.wait(self.flush_every):
            self.flush()

    def _absorb(self) -> None:
        """Move the records handed over into the history and the waiting lists (held
        under ``_send_lock``: the feed's thread and a view's hello both come here)."""
        with self._lock:
            batch, self._pending = self._pending, []
        for rec in batch:
            log = self._logs.get(rec.rank)
            if log is None:
                log = self._logs[rec.rank] = ThinnedLog(self._history_cap)
            log.add(rec)
            self._waiting.setdefault(rec.rank, []).append(rec)

    def flush(self) -> None:
        t = time.thread_time()
        with self._send_lock:
            self._flush()
        self.cpu += time.thread_time() - t

    def _flush(self) -> None:
        self._absorb()
        now = time.monotonic()
        self._tokens = min(float(POINTS_PER_S), self._tokens + (now - self._filled) * POINTS_PER_S)
        self._filled = now
        out = self._take(final=self._stopped.is_set())
        if out or self._dirty.is_set():
            self._send(out, reset=False, summary=self._summary_due(now))

    def _summary_due(self, now: float) -> bool:
        """Whether this message carries the summary: always on a state change or the
        last flush, else at most SUMMARY_RANKS_PER_S rank rows a second."""
        every = max(self.flush_every, len(self.metrics.ranks) / SUMMARY_RANKS_PER_S)
        if self._dirty.is_set() or self._stopped.is_set() or now - self._summary_at >= every:
            self._dirty.clear()
            self._summary_at = now
            return True
        return False

    def _take(self, final: bool = False) -> list[Record]:
        """The waiting records that fit the point budget (every rank's if *final*)."""
        out: list[Record] = []
        per_rank = {r: thin(recs, self._stride(r, len(recs))) for r, recs in self._waiting.items()}
        wanted = sum(len(v) for v in per_rank.values())
        if wanted <= self._tokens:
            for rank, recs in self._waiting.items():
                self._sent[rank] = self._sent.get(rank, 0) + len(recs)
                out.extend(per_rank[rank])
            self._waiting = {}
        else:
            # Over budget: each rank's records as one envelope (2 points), as many ranks
            # as the budget has room for, the longest waiting first; the rest wait.
            room = max(2, int(self._tokens) // 2 * 2)
            turn = list(self._waiting) if final else list(self._waiting)[: room // 2]
            for rank in turn:
                recs = self._waiting.pop(rank)
                self._sent[rank] = self._sent.get(rank, 0) + len(recs)
                out.extend(envelope(recs))
        self._tokens -= len(out)
        return out

    def _stride(self, rank: int, new: int) -> int:
        return stride_for(self._sent.get(rank, 0) + new)

    def history(self) -> None:
        """Send every record so far (thinned) with reset: for a view that came late.

        Costs the points sent, not the records: the history is kept thinned as it comes.
        Records still waiting for the point budget are in it, so they are not sent again."""
        t = time.thread_time()
        with self._send_lock:
            self._absorb()
            rows: list[Record] = []
            for rank, log in self._logs.items():
                rows.extend(log.points())
                self._sent[rank] = log.count
            self._waiting = {}
            self._send(rows, reset=True)
        self.cpu += time.thread_time() - t

    def _send(self, records: list[Record], reset: bool, summary: bool = True) -> None:
        # Without a summary the view keeps the last one it got.
        message: RecordsMessage = {
            "kind": "records",
            "records": [r.to_json() for r in records],
            "summary": self.summary().to_json() if summary else None,
            "clock": time.time(),
        }
        if reset:
            message["reset"] = True
        self.widget.send(message)
        self.messages += 1
        self.points += len(records)

    def stop(self) -> None:
        """Stop the timer and send what is left (the run's last records)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._dirty.set()
        self.flush()
