"""RunMetrics: summaries, stragglers, the mean curve."""

from __future__ import annotations

import threading

import pytest

from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import WINDOW, Record


def rec(rank: int, step: int | None, time: float, **metrics: float) -> Record:
    return Record(rank=rank, step=step, time=time, metrics=dict(metrics))


def steady(
    rank: int, steps: int, step_time: float, t0: float = 1000.0, comm_time: float | None = None
) -> list[Record]:
    """Records of a rank reporting every *step_time* seconds, 32 samples a step."""
    return [
        Record(
            rank=rank,
            step=i,
            time=t0 + i * step_time,
            step_time=step_time if i else None,
            comm_time=comm_time,
            samples=32,
            metrics={"loss": 1.0 / (i + 1)},
        )
        for i in range(steps)
    ]


def test_summary_of_one_rank() -> None:
    m = RunMetrics([0])
    m.add(steady(0, 30, 0.01, comm_time=0.004))
    s = m.summary(0)
    assert (s.rank, s.records, s.last_step) == (0, 30, 29)
    assert s.last_loss == pytest.approx(1 / 30)
    assert s.step_time == pytest.approx(0.01)
    # The window's first record only opens the span: 19 steps of 32 samples in 0.19 s.
    assert s.samples_per_s == pytest.approx(32 / 0.01)
    assert s.comm_share == pytest.approx(0.4)
    assert s.last_time == pytest.approx(1000 + 29 * 0.01)
    assert not s.straggler


def test_summary_follows_recent_records_only() -> None:
    m = RunMetrics([0])
    m.add(steady(0, 50, 0.1))
    m.add(steady(0, WINDOW, 0.01, t0=2000.0))
    assert m.summary(0).step_time == pytest.approx(0.01)


def test_summary_without_records_or_metrics() -> None:
    m = RunMetrics([0, 1])
    m.add([rec(0, None, 1.0)])
    empty, bare = m.summary(1), m.summary(0)
    assert (
        empty.records,
        empty.last_step,
        empty.step_time,
        empty.samples_per_s,
        empty.last_time,
    ) == (0, None, None, None, None)
    assert (bare.records, bare.last_step, bare.last_loss, bare.comm_share) == (1, None, None, None)


def test_comm_share_is_capped_at_one() -> None:
    m = RunMetrics([0])
    m.add(steady(0, 5, 0.01, comm_time=0.05))
    assert m.summary(0).comm_share == 1.0


@pytest.mark.parametrize(("slow", "flagged"), [(0.0125, True), (0.0115, False)])
def test_without_comm_time_the_straggler_is_the_slowest_step(slow: float, flagged: bool) -> None:
    m = RunMetrics([0, 1, 2])
    m.add(steady(0, 10, 0.01) + steady(1, 10, 0.01) + steady(2, 10, slow))
    flags = [s.straggler for s in m.summaries()]
    assert flags == [False, False, flagged]


def test_in_lockstep_ddp_the_straggler_is_the_rank_with_most_compute() -> None:
    # Measured: with rank 1 sleeping 30 ms a step, both ranks step at ~40 ms; the healthy
    # rank waits in the all-reduce (comm 88%), the slow one hardly (11%).
    m = RunMetrics([0, 1])
    m.add(steady(0, 30, 0.040, comm_time=0.035) + steady(1, 30, 0.040, comm_time=0.0045))
    s0, s1 = m.summaries()
    assert s0.step_time == s1.step_time and s0.samples_per_s == s1.samples_per_s
    assert s1.compute_time == pytest.approx(0.0355) and s0.compute_time == pytest.approx(0.005)
    assert (s0.straggler, s1.straggler) == (False, True)


def test_no_straggler_with_one_timed_rank() -> None:
    m = RunMetrics([0, 1])
    m.add(steady(0, 10, 0.5))
    assert [s.straggler for s in m.summaries()] == [False, False]


def test_mean_series_uses_steps_every_rank_reported() -> None:
    m = RunMetrics([0, 1])
    m.add([rec(0, s, s, loss=float(s)) for s in range(5)])
    m.add([rec(1, s, s, loss=float(s) + 2) for s in range(3)])
    m.add([rec(1, 3, 3.0, acc=0.5)])  # no loss at step 3
    assert m.mean_series("loss") == ([0.0, 1.0, 2.0], [1.0, 2.0, 3.0])
    assert m.mean_series("missing") == ([], [])
    assert RunMetrics([]).mean_series("loss") == ([], [])


def test_series_skips_records_without_the_metric_and_uses_order_without_steps() -> None:
    m = RunMetrics([0])
    m.add(
        [
            rec(0, None, 0.0, loss=3.0),
            rec(0, None, 1.0),
            rec(0, None, 2.0, loss=1.0),
        ]
    )
    assert m.series(0, "loss") == ([0.0, 2.0], [3.0, 1.0])


def test_listeners_hear_every_batch_and_count_adds_up() -> None:
    m = RunMetrics([0, 1])
    heard = []
    m.subscribe(lambda batch: heard.append((len(batch), m.count)))
    m.add(steady(0, 3, 0.1))
    m.add(steady(1, 2, 0.1))
    assert heard == [(3, 3), (2, 5)] and len(m.records(0)) == 3


def test_concurrent_adds_and_reads() -> None:
    m = RunMetrics([0, 1])

    def add(rank: int) -> None:
        for i in range(500):
            m.add([Record(rank=rank, step=i, time=float(i), step_time=0.01)])

    threads = [threading.Thread(target=add, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        m.summaries()
    for t in threads:
        t.join()
    assert m.count == 1000 and [s.last_step for s in m.summaries()] == [499, 499]


def test_jitter_between_two_ranks_is_not_a_straggler() -> None:
    # 60% more compute than the other rank, but 1.5 ms in a 40 ms step: noise, not a cost.
    m = RunMetrics([0, 1])
    m.add(steady(0, 30, 0.040, comm_time=0.0375) + steady(1, 30, 0.040, comm_time=0.036))
    s0, s1 = m.summaries()
    assert s1.compute_time > 1.5 * s0.compute_time  # type: ignore[operator]
    assert (s0.straggler, s1.straggler) == (False, False)
