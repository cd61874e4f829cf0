"""RunMetrics: summaries, stragglers, the mean curve."""

from __future__ import annotations

import threading

import pytest

from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import WINDOW, Record


def rec(rank: int, step: int | None, time: float, **metrics: float) -> Record:
    return Record(rank=rank, step=step, time=time, metrics=dict(metrics))


def steady(
    rank: int,
    steps: int,
    step_time: float,
    t0: float = 1000.0,
    comm_time: float | None = None,
    jitter: float = 0.0,
) -> list[Record]:
    """Records of a rank reporting every *step_time* seconds, 32 samples a step; with
    *jitter*, comm_time varies by up to that much from step to step (a per-step sample)."""
    return [
        Record(
            rank=rank,
            step=i,
            time=t0 + i * step_time,
            step_time=step_time if i else None,
            comm_time=None if comm_time is None else comm_time - jitter * ((i * 7) % 10) / 10,
            samples=32,
            metrics={"loss": 1.0 / (i + 1)},
        )
        for i in range(steps)
    ]


def recorded(rank: int, window: list[tuple[float, float]]) -> list[Record]:
    """A rank's window as a real run recorded it: (step ms, comm ms) per record."""
    return [
        Record(rank=rank, step=i, time=1000.0 + i, step_time=st / 1e3, comm_time=ct / 1e3)
        for i, (st, ct) in enumerate(window)
    ]


# The last windows of two 60-step runs of notebook 9's model on 2 CPU ranks under two CPU
# hogs (bench/straggler.py, load average 5.8). Healthy: rank 1 got less CPU, the others
# waited a median 4.6 ms a step for it (over a quarter of the step), but in 13 of the 20
# steps only. Slowed (rank 1 sleeps 30 ms a step): 29.2 ms a step, in 19 of 20 steps.
HEALTHY_UNDER_LOAD = {
    0: [(10.8, 4.3), (23.1, 6.4), (21.1, 19.1), (12.7, 12.7), (31.8, 8.3), (12.7, 12.7),
        (29.7, 8.3), (21.6, 21.6), (13.7, 13.7), (22.1, 10.2), (15.0, 15.0), (14.9, 10.8),
        (9.3, 9.3), (17.2, 5.3), (15.0, 13.1), (18.0, 11.1), (10.2, 10.2), (23.1, 6.3),
        (10.3, 10.3), (21.4, 6.8)],
    1: [(20.5, 7.0), (11.8, 11.8), (20.5, 2.9), (23.2, 17.0), (24.1, 13.3), (12.3, 12.3),
        (36.0, 8.9), (16.2, 11.7), (18.9, 12.5), (14.3, 13.2), (18.7, 10.2), (11.1, 10.6),
        (9.3, 2.2), (17.4, 5.8), (14.8, 4.3), (18.0, 6.3), (11.3, 2.1), (22.2, 7.5),
        (10.3, 9.6), (21.5, 2.6)],
}  # fmt: skip
SLOWED_UNDER_LOAD = {
    0: [(47.7, 31.8), (64.6, 42.4), (46.5, 46.5), (59.1, 42.1), (93.8, 54.5), (63.3, 63.3),
        (59.0, 43.8), (53.7, 50.2), (44.4, 44.4), (41.6, 39.6), (40.0, 36.7), (37.2, 36.8),
        (40.7, 34.3), (45.5, 37.2), (38.9, 38.9), (38.7, 35.4), (43.0, 34.6), (38.9, 38.9),
        (44.6, 35.5), (96.1, 41.1)],
    1: [(47.6, 4.9), (63.7, 12.6), (53.2, 24.3), (65.4, 16.1), (80.8, 15.3), (63.2, 20.4),
        (63.4, 28.6), (52.3, 28.1), (44.1, 17.4), (38.0, 9.1), (41.3, 3.2), (37.2, 7.3),
        (42.1, 3.3), (45.2, 8.0), (38.9, 7.2), (38.3, 3.8), (41.7, 3.2), (40.4, 6.0),
        (65.1, 4.8), (75.8, 27.3)],
}  # fmt: skip


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


@pytest.mark.parametrize(("slow", "flagged"), [(0.014, True), (0.012, False)])
def test_without_comm_time_the_straggler_is_the_slowest_step(slow: float, flagged: bool) -> None:
    # No collective: a rank 4 ms slower a step (29% of its step) is flagged, 2 ms (17%) not.
    m = RunMetrics([0, 1, 2])
    m.add(steady(0, 12, 0.01) + steady(1, 12, 0.01) + steady(2, 12, slow))
    summaries = m.summaries()
    assert [s.straggler for s in summaries] == [False, False, flagged]
    assert summaries[2].others_wait == pytest.approx(slow - 0.01)


def test_in_lockstep_ddp_the_straggler_is_the_rank_the_others_wait_for() -> None:
    # Measured: with rank 1 sleeping 30 ms a step, both ranks step at ~40 ms; the healthy
    # rank waits in the all-reduce (comm 88%), the slow one hardly (11%).
    m = RunMetrics([0, 1])
    m.add(
        steady(0, 30, 0.040, comm_time=0.035, jitter=0.002)
        + steady(1, 30, 0.040, comm_time=0.0045, jitter=0.002)
    )
    s0, s1 = m.summaries()
    assert s0.step_time == s1.step_time and s0.samples_per_s == s1.samples_per_s
    assert s1.outside_comm_time == pytest.approx(0.0365, abs=1e-3)
    assert s0.outside_comm_time == pytest.approx(0.006, abs=1e-3)
    assert s1.others_wait == pytest.approx(0.0305, abs=1e-4)
    assert s0.others_wait == pytest.approx(-0.0305, abs=1e-4)  # it waits for rank 1
    assert s1.compute_time == s1.outside_comm_time  # the former name still reads
    assert (s0.straggler, s1.straggler) == (False, True)


def test_a_recorded_healthy_window_under_load_flags_nobody() -> None:
    # The others wait over a quarter of a step for rank 1 (the old rule flagged it), but
    # in 13 of 20 steps: who arrives last is still a coin toss.
    m = RunMetrics([0, 1])
    for rank, window in HEALTHY_UNDER_LOAD.items():
        m.add(recorded(rank, window))
    s0, s1 = m.summaries()
    assert s1.others_wait is not None and s1.step_time is not None
    assert s1.others_wait > 0.25 * s1.step_time
    assert s1.waited_for_share == pytest.approx(13 / 20)
    assert (s0.straggler, s1.straggler) == (False, False)


def test_a_recorded_slowed_window_under_load_flags_the_slow_rank() -> None:
    m = RunMetrics([0, 1])
    for rank, window in SLOWED_UNDER_LOAD.items():
        m.add(recorded(rank, window))
    s0, s1 = m.summaries()
    assert s1.others_wait == pytest.approx(0.0292, abs=1e-4)
    assert s1.waited_for_share == pytest.approx(19 / 20)
    assert s0.waited_for_share == pytest.approx(1 / 20)
    assert (s0.straggler, s1.straggler) == (False, True)


@pytest.mark.parametrize(("late_steps", "flagged"), [(15, False), (16, True)])
def test_a_rank_is_flagged_only_when_the_others_wait_in_most_steps(
    late_steps: int, flagged: bool
) -> None:
    # Rank 1 arrives 15 ms late (38% of a 40 ms step) in *late_steps* of 20, 5 ms early in
    # the others: a median far above STRAGGLER_MIN_SHARE either way; persistence decides.
    m = RunMetrics([0, 1])
    m.add(recorded(0, [(40.0, 20.0 + 0.01 * i) for i in range(20)]))  # per-step samples
    m.add(recorded(1, [(40.0, (5.0 if i < late_steps else 25.0) + 0.01 * i) for i in range(20)]))
    s0, s1 = m.summaries()
    assert s1.others_wait == pytest.approx(0.015, abs=3e-4)
    assert s1.waited_for_share == pytest.approx(late_steps / 20)
    assert (s0.straggler, s1.straggler) == (False, flagged)


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
    # 60% more time outside comm than the other rank, but 1.5 ms in a 40 ms step: below
    # STRAGGLER_MIN_SHARE, even with hardly any noise.
    m = RunMetrics([0, 1])
    m.add(
        steady(0, 30, 0.040, comm_time=0.0375, jitter=0.0001)
        + steady(1, 30, 0.040, comm_time=0.036, jitter=0.0001)
    )
    s0, s1 = m.summaries()
    assert s1.outside_comm_time > 1.5 * s0.outside_comm_time  # type: ignore[operator]
    assert (s0.straggler, s1.straggler) == (False, False)
