"""The live view's kernel side: an anywidget whose ESM and CSS ship inside this package,
and a feed that sends it only new records, batched.

Why anywidget: its front end loads the widget's module from the kernel (the ``_esm``
trait), so the chart draws in JupyterLab 4, Notebook 7, VS Code, Colab and marimo, with or
without this package's labextension (which still holds the side panel). The module is
built from the same chart sources as the panel (extension/src/chart, ``npm run
build:live``, part of ``make ext-build``) into ``static/live.js`` and ``static/live.css``.
The kernel draws nothing while the run goes: every ``FLUSH_EVERY`` s the feed sends the
records that came in (one custom comm message: ``{"kind": "records", "records":
[Record.to_json()...], "summary": RunSummary.to_json(), "clock": kernel time}``). Past
``MAX_POINTS`` records of a rank, each batch is sent as a min/max envelope per bucket of
records, so a long run costs the browser a bounded number of points and spikes stay
visible. A model that appears later (a reloaded page) says ``{"kind": "hello"}`` and
gets the whole history, thinned the same way, with ``reset``. At the end the ``final``
trait carries the static picture, which every open view shows.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anywidget
from traitlets import Bool, Dict, Float, Int, Unicode

from ..metrics import RunMetrics
from ..protocol import Record, RunSummary

STATIC = Path(__file__).resolve().parent / "static"
FLUSH_EVERY = 0.15  # seconds between batches: the chart changes up to ~7 times a second
MAX_POINTS = 4000  # records per rank sent as they are; beyond, min/max envelopes
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


def built() -> bool:
    return (STATIC / "live.js").is_file()


class LiveRunWidget(anywidget.AnyWidget):
    """The model of the cell's live view (drawn by extension/src/chart/widget.ts)."""

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


def stride_for(count: int, max_points: int = MAX_POINTS) -> int:
    """Records per bucket once a rank has *count*: 1 up to max_points, then powers of 2."""
    stride = 1
    while count > max_points * stride:
        stride *= 2
    return stride


def _envelope(chunk: Sequence[Record]) -> list[Record]:
    """Two records standing for *chunk*: each metric's lowest, then its highest value.

    A non-finite value in the chunk is kept as the low one, so the gap still shows."""
    if len(chunk) <= 2:
        return list(chunk)
    low: dict[str, float] = {}
    high: dict[str, float] = {}
    for rec in chunk:
        for name, value in rec.metrics.items():
            if not math.isfinite(value):
                low[name] = value
                continue
            if name not in low or (math.isfinite(low[name]) and value < low[name]):
                low[name] = value
            if name not in high or value > high[name]:
                high[name] = value
    first, last = chunk[0], chunk[-1]
    return [
        dataclasses.replace(first, metrics=low),
        dataclasses.replace(last, metrics={**low, **high}),
    ]


def thin(records: Sequence[Record], stride: int) -> list[Record]:
    """*records* (one rank's, in order) as they are (stride 1) or as envelopes."""
    if stride <= 1:
        return list(records)
    out: list[Record] = []
    for i in range(0, len(records), stride):
        out.extend(_envelope(records[i : i + stride]))
    return out


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

    def flush(self) -> None:
        t = time.thread_time()
        with self._lock:
            batch, self._pending = self._pending, []
        if batch or self._dirty.is_set():
            self._dirty.clear()
            self._send(self._thin_batch(batch), reset=False)
        self.cpu += time.thread_time() - t

    def _thin_batch(self, batch: list[Record]) -> list[Record]:
        by_rank: dict[int, list[Record]] = {}
        for rec in batch:
            by_rank.setdefault(rec.rank, []).append(rec)
        out: list[Record] = []
        for rank, recs in by_rank.items():
            seen = self._sent.get(rank, 0)
            self._sent[rank] = seen + len(recs)
            out.extend(thin(recs, stride_for(seen + len(recs))))
        return out

    def history(self) -> None:
        """Send every record so far (thinned) with reset: for a view that came late."""
        t = time.thread_time()
        rows: list[Record] = []
        for rank in self.metrics.ranks:
            recs = self.metrics.records(rank)
            rows.extend(thin(recs, stride_for(len(recs))))
        self._send(rows, reset=True)
        self.cpu += time.thread_time() - t

    def _send(self, records: list[Record], reset: bool) -> None:
        message: dict[str, Any] = {
            "kind": "records",
            "records": [r.to_json() for r in records],
            "summary": self.summary().to_json(),
            "clock": time.time(),
        }
        if reset:
            message["reset"] = True
        with self._send_lock:
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
