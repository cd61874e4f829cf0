"""The live view's thinned history: kept as records come, the same points as thinning
every record at once, bounded whatever the run's length."""

from __future__ import annotations

import math
import random

import pytest

from dist_notebook.display.live import HISTORY_POINTS, LiveFeed
from dist_notebook.metrics import RunMetrics
from dist_notebook.metrics.thinning import ThinnedLog, thin
from dist_notebook.protocol import Record


def rec(step: int, **metrics: float) -> Record:
    return Record(0, step, 1000.0 + step, 0.01, 0.002, 32.0, dict(metrics))


def as_tuples(records: list[Record]) -> list[tuple]:
    return [(r.step, r.time, tuple(sorted(r.metrics.items()))) for r in records]


@pytest.mark.parametrize("count", [1, 2, 3, 7, 100, 999, 4096, 20_001])
@pytest.mark.parametrize("cap", [4, 10, 500])
def test_the_kept_history_is_what_thinning_every_record_gives(count: int, cap: int) -> None:
    rng = random.Random(count * 31 + cap)
    records = []
    for i in range(count):
        loss = rng.random()
        if rng.random() < 0.01:
            loss = rng.choice([math.nan, math.inf])
        metrics = {"loss": loss} if i % 5 else {"loss": loss, "acc": rng.random()}
        records.append(rec(i, **metrics))
    log = ThinnedLog(cap)
    for r in records:
        log.add(r)
    points = log.points()
    expected = as_tuples(thin(records, log.stride))
    got = as_tuples(points)
    # nan != nan: compare the non-finite values by name
    assert [(s, t, tuple((k, repr(v)) for k, v in m)) for s, t, m in got] == [
        (s, t, tuple((k, repr(v)) for k, v in m)) for s, t, m in expected
    ]
    assert len(points) <= cap + 2, (len(points), cap)
    # The same, folded a stretch at a time (how a long run's metrics fold their oldest).
    stretched = ThinnedLog(cap)
    for i in range(0, count, 333):
        stretched.extend(records[i : i + 333])
    again = [(s, t, tuple((k, repr(v)) for k, v in m)) for s, t, m in as_tuples(stretched.points())]
    assert again == [(s, t, tuple((k, repr(v)) for k, v in m)) for s, t, m in expected]
    assert log.count == count
    assert points[0].step == 0 and points[-1].step == count - 1


class Sent:
    def __init__(self) -> None:
        self.messages: list[dict] = []

    def send(self, message: dict) -> None:
        self.messages.append(message)


class Summary:
    def to_json(self) -> dict:
        return {}


def test_a_late_views_history_is_bounded_and_not_sent_twice() -> None:
    """64 ranks x 2,000 records: the history sends at most HISTORY_POINTS (+ 2 a rank),
    has every rank's first and last step, the lowest loss, and the records that waited
    for the point budget are not sent again after it."""
    ranks = list(range(64))
    metrics = RunMetrics(ranks)
    sent = Sent()
    feed = LiveFeed(sent, metrics, Summary, flush_every=60)  # type: ignore[arg-type]
    for step in range(2000):
        metrics.add(
            [Record(r, step, float(step), metrics={"loss": 1.0 / (1 + step) + r}) for r in ranks]
        )
    feed.history()
    history = sent.messages[-1]
    assert history["reset"] is True
    points = history["records"]
    assert len(points) <= HISTORY_POINTS + 2 * len(ranks), len(points)
    for r in ranks:
        steps = [p["step"] for p in points if p["rank"] == r]
        assert steps[0] == 0 and steps[-1] == 1999, (r, steps[:3], steps[-3:])
        low = min(p["metrics"]["loss"] for p in points if p["rank"] == r)
        assert low == pytest.approx(1.0 / 2000 + r)
    before = len(sent.messages)
    feed.flush()  # nothing came since: nothing more to send
    assert all(not m["records"] for m in sent.messages[before:]), sent.messages[before:]
    metrics.add([Record(0, 2000, 2000.0, metrics={"loss": 0.5})])
    feed.flush()
    assert [p["step"] for p in sent.messages[-1]["records"]] == [2000]


def test_a_long_runs_metrics_keep_a_bounded_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its bound a rank's oldest records are folded into envelopes: the count, the
    latest records and the summary stay exact, the history keeps the first step and the
    lowest loss, and what is kept stays bounded whatever the run's length."""
    from dist_notebook.metrics import series

    monkeypatch.setattr(series, "KEPT_RECORDS", 1000)
    monkeypatch.setattr(series, "MIN_KEPT_PER_RANK", 500)
    monkeypatch.setattr(series, "OLDER_POINTS_PER_RANK", (100, 200))
    metrics = RunMetrics([0, 1])
    for step in range(20_000):
        loss = 0.001 if step == 1234 else 1.0 + (step % 7) / 10
        metrics.add([Record(r, step, float(step), 0.01, 0.0, 8.0, {"loss": loss}) for r in (0, 1)])
    assert metrics.count == 40_000
    for rank in (0, 1):
        history = metrics.records(rank)
        assert len(history) <= 500 + 200 + 2, len(history)
        assert history[0].step == 0 and history[-1].step == 19_999
        assert [r.step for r in history[-100:]] == list(range(19_900, 20_000))  # as they came
        assert min(r.metrics["loss"] for r in history) == 0.001  # the spike survives
        summary = metrics.summary(rank)
        assert summary.records == 20_000 and summary.last_step == 19_999
