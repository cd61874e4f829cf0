"""The run's verdict (dist_notebook/verdict.py) on synthetic records: each kind and the
thresholds' edges, through protocol.summarize_rank / summarize_run as every view gets it."""

from __future__ import annotations

from typing import Any

import pytest

from dist_notebook import protocol, verdict
from dist_notebook.protocol import Record, RunSummary

MS = 1e-3


def rank_records(
    rank: int,
    *,
    step: float = 20 * MS,
    comm: float | list[float] = 2 * MS,
    cpu: float | None = 17 * MS,
    delay: float | None = 0.0,
    load: float | None = 1.0,
    cores: float | None = 2.0,
    data: float | None = None,
    peak: float | None = 1e8,
    steps: int = 20,
    gpu: dict[str, float] | None = None,
) -> list[Record]:
    comms = comm if isinstance(comm, list) else [comm] * steps
    return [
        Record(
            rank=rank,
            step=k,
            time=100.0 + k * step,
            step_time=step,
            comm_time=comms[k],
            samples=64.0,
            gpu=gpu,
            cpu_time=cpu,
            run_delay=delay,
            load=load,
            cores=cores,
            data_time=data,
            peak_mem=None if peak is None else peak + k,
        )
        for k in range(steps)
    ]


def run_of(*per_rank: list[Record]) -> RunSummary:
    ranks = [
        protocol.summarize_rank(
            recs[0].rank,
            recs[-protocol.WINDOW :],
            records=len(recs),
            first_step=0,
            last_step=recs[-1].step,
            last_loss=None,
        )
        for recs in per_rank
    ]
    return protocol.summarize_run("r", "running", None, ranks)


def lockstep(
    slow: dict[str, Any], fast: dict[str, Any], *, step: float, extra: float
) -> RunSummary:
    """Rank 1 arrives *extra* s late at each all-reduce; rank 0 waits that long in it."""
    return run_of(
        rank_records(0, step=step, comm=extra + 1 * MS, **fast),
        rank_records(1, step=step, comm=1 * MS, **slow),
    )


def alternating(n: int = 20, late: float = 3 * MS, base: float = 1 * MS) -> tuple[list, list]:
    """Healthy ranks: which one arrives last changes every step."""
    a = [base + (late if k % 2 else 0.0) for k in range(n)]
    b = [base + (0.0 if k % 2 else late) for k in range(n)]
    return a, b


def test_healthy_ranks_give_healthy_and_no_straggler() -> None:
    a, b = alternating()
    run = run_of(rank_records(0, comm=a), rank_records(1, comm=b))
    assert run.verdict == "healthy"
    assert not any(r.straggler or r.starved for r in run.ranks)
    assert run.to_json()["verdict"] == "healthy"


def test_busy_machine_alone_is_healthy() -> None:
    # Two hogs beside: every rank waits for a CPU alike (run delay half the step, load 4).
    a, b = alternating()
    run = run_of(
        rank_records(0, step=40 * MS, comm=a, delay=20 * MS, load=4.0),
        rank_records(1, step=40 * MS, comm=b, delay=20 * MS, load=4.0),
    )
    assert run.verdict == "healthy"
    assert not any(r.straggler or r.starved for r in run.ranks)


def test_starved_rank_is_named_and_not_the_straggler() -> None:
    # Rank 1 shares its core with two busy processes: same CPU time, 3x the wall.
    run = lockstep(
        {"cpu": 17 * MS, "delay": 38 * MS, "load": 4.6, "cores": 1.0},
        {"cpu": 17 * MS, "delay": 0.5 * MS, "load": 4.6, "cores": 1.0},
        step=57 * MS,
        extra=38 * MS,
    )
    r0, r1 = run.ranks
    assert r1.starved and not r1.straggler
    assert not r0.straggler and not r0.starved
    assert r1.cpu_share == pytest.approx(17 / 55)
    assert run.verdict == (
        "rank 1 is starved: it gets 31% of a core (load 5 on 1 core); nothing to fix in the code"
    )
    assert not any(h.straggler for h in run.hosts)


def test_heavier_shard_does_more_work() -> None:
    run = lockstep({"cpu": 38 * MS}, {"cpu": 17 * MS}, step=40 * MS, extra=21 * MS)
    r1 = run.ranks[1]
    assert r1.straggler and not r1.starved
    assert r1.work_ratio == pytest.approx(38 / 17)
    assert run.verdict == (
        "rank 1 does 2.2x the work of the median rank: its shard or its branch is heavier"
    )


def test_heavier_rank_that_also_waits_for_a_cpu_does_more_work() -> None:
    # More CPU time is work whatever the machine does: not starved.
    run = lockstep(
        {"cpu": 38 * MS, "delay": 30 * MS}, {"cpu": 17 * MS}, step=70 * MS, extra=50 * MS
    )
    assert run.ranks[1].straggler and not run.ranks[1].starved
    assert "does 2.2x the work" in (run.verdict or "")


def test_more_work_without_the_straggler_rule() -> None:
    # On idle cores the heavier rank may be waited for by less than the rule's share.
    a, b = alternating()
    run = run_of(rank_records(0, comm=a, cpu=10 * MS), rank_records(1, comm=b, cpu=15 * MS))
    assert not any(r.straggler for r in run.ranks)
    assert run.verdict is not None and run.verdict.startswith("rank 1 does 1.5x the work")


def test_sleeping_rank_is_the_straggler() -> None:
    run = lockstep({"cpu": 17 * MS}, {"cpu": 17 * MS}, step=50 * MS, extra=30 * MS)
    assert run.ranks[1].straggler and not run.ranks[1].starved
    assert run.verdict == (
        "rank 1 is the straggler: the others wait 30 ms of each step for it, and it does no "
        "more work (it sleeps, or waits for I/O, a lock or a device)"
    )


@pytest.mark.parametrize(("ratio", "more"), [(1.3, True), (1.29, False)])
def test_work_ratio_edge(ratio: float, more: bool) -> None:
    a, b = alternating()
    run = run_of(rank_records(0, comm=a, cpu=10 * MS), rank_records(1, comm=b, cpu=ratio * 10 * MS))
    assert ("does 1.3x the work" in (run.verdict or "")) is more


def test_work_min_seconds() -> None:
    # 2x of a tiny step is noise, not work: under WORK_MIN_S apart.
    a, b = alternating()
    run = run_of(rank_records(0, comm=a, cpu=0.4 * MS), rank_records(1, comm=b, cpu=0.8 * MS))
    assert run.verdict == "healthy"


@pytest.mark.parametrize(("delay_share", "starved"), [(0.2, True), (0.19, False)])
def test_starved_delay_share_edge(delay_share: float, starved: bool) -> None:
    step = 100 * MS
    run = lockstep(
        {"cpu": 17 * MS, "delay": delay_share * step},
        {"cpu": 17 * MS, "delay": 0.0},
        step=step,
        extra=25 * MS,
    )
    assert run.ranks[1].starved is starved
    assert run.ranks[1].straggler is not starved


@pytest.mark.parametrize(("explains", "starved"), [(0.5, True), (0.45, False)])
def test_starved_explains_edge(explains: float, starved: bool) -> None:
    # The rank's extra wait for a CPU must explain half the others' wait for it.
    step, wait = 100 * MS, 40 * MS
    run = lockstep(
        {"cpu": 17 * MS, "delay": 30 * MS + explains * wait},
        {"cpu": 17 * MS, "delay": 30 * MS},
        step=step,
        extra=wait,
    )
    assert run.ranks[1].starved is starved


@pytest.mark.parametrize(("load", "starved"), [(2.1, True), (2.0, False)])
def test_starved_by_load_without_run_delay(load: float, starved: bool) -> None:
    run = lockstep(
        {"cpu": 17 * MS, "delay": None, "load": load},
        {"cpu": 17 * MS, "delay": None, "load": load},
        step=60 * MS,
        extra=40 * MS,
    )
    assert run.ranks[1].starved is starved
    assert run.ranks[1].straggler is not starved
    if starved:
        assert run.verdict == (
            "rank 1 is starved: it waits for a CPU (load 2 on 2 cores); nothing to fix in the code"
        )


def test_gpu_ranks_judge_no_cpu_work() -> None:
    gpu = {"util": 0.9, "mem": 1e9, "power": 200.0}
    run = lockstep(
        {"cpu": 38 * MS, "gpu": gpu}, {"cpu": 17 * MS, "gpu": gpu}, step=40 * MS, extra=21 * MS
    )
    assert run.ranks[1].work_ratio is None
    assert run.ranks[1].straggler
    assert run.verdict is not None and "is the straggler" in run.verdict


def test_no_cpu_time_keeps_the_straggler_rule() -> None:
    # Records of an older rank: no CPU time, so no starved and no work verdict.
    run = lockstep(
        {"cpu": None, "delay": None}, {"cpu": None, "delay": None}, step=50 * MS, extra=30 * MS
    )
    assert run.ranks[1].straggler and not run.ranks[1].starved
    assert "is the straggler" in (run.verdict or "")


@pytest.mark.parametrize(("share", "bound"), [(0.3, True), (0.29, False)])
def test_input_bound_edge(share: float, bound: bool) -> None:
    a, b = alternating()
    run = run_of(
        rank_records(0, comm=a, data=share * 20 * MS), rank_records(1, comm=b, data=share * 20 * MS)
    )
    assert (run.verdict == f"input-bound: {100 * share:.0f}% of each step waits for data") is bound
    if not bound:
        assert run.verdict == "healthy"


def test_one_rank_input_bound() -> None:
    a, b = alternating()
    run = run_of(rank_records(0, comm=a, data=1 * MS), rank_records(1, comm=b, data=8 * MS))
    assert run.verdict == "rank 1 is input-bound: 40% of its step waits for data"


@pytest.mark.parametrize(("comm", "bound"), [(10 * MS, True), (9.8 * MS, False)])
def test_comm_bound_edge(comm: float, bound: bool) -> None:
    a, b = alternating(late=0.0, base=comm)
    run = run_of(rank_records(0, comm=a, cpu=8 * MS), rank_records(1, comm=b, cpu=8 * MS))
    said = "comm-bound: the gradient all-reduce takes 50% of each step, even for the last rank"
    assert (run.verdict or "").startswith(said) is bound


def test_waiting_for_each_other_is_not_comm_bound() -> None:
    # Busy healthy ranks arrive last in turns: each waits 12 ms of 20 in every other step,
    # the transfer itself takes 2 ms.
    a, b = alternating(late=12 * MS, base=2 * MS)
    run = run_of(rank_records(0, comm=a, cpu=6 * MS), rank_records(1, comm=b, cpu=6 * MS))
    assert [r.comm_share for r in run.ranks] == [pytest.approx(0.4)] * 2
    assert run.verdict == "healthy"


def test_not_enough_steps_no_verdict() -> None:
    few = protocol.STRAGGLER_MIN_SAMPLES - 1
    a, b = alternating(few)
    run = run_of(rank_records(0, comm=a, steps=few), rank_records(1, comm=b, steps=few))
    assert run.verdict is None
    assert run_of().verdict is None


def test_one_rank() -> None:
    assert run_of(rank_records(0, steps=verdict.MIN_RECORDS - 1)).verdict is None
    assert run_of(rank_records(0)).verdict == "healthy"
    assert run_of(rank_records(0, data=10 * MS)).verdict == (
        "input-bound: 50% of each step waits for data"
    )


def test_summary_measures() -> None:
    run = run_of(rank_records(0, cpu=17 * MS, delay=3 * MS, data=2 * MS, load=3.5, cores=2.0))
    (r,) = run.ranks
    assert r.cpu_time == pytest.approx(17 * MS)
    assert r.run_delay == pytest.approx(3 * MS)
    assert r.cpu_share == pytest.approx(0.85)
    assert r.data_share == pytest.approx(0.1)
    assert (r.load, r.cores) == (3.5, 2.0)
    assert r.peak_mem == 1e8 + 19  # the window's largest
    sent = r.to_json()
    assert sent["peak_mem"] == 1e8 + 19 and sent["starved"] is False


def test_two_starved_ranks() -> None:
    # Ranks 1 and 2 share a core with busy processes; rank 0 waits for both.
    slow = {"cpu": 17 * MS, "delay": 38 * MS, "load": 6.0, "cores": 1.0}
    run = run_of(
        rank_records(0, step=57 * MS, comm=39 * MS),
        rank_records(1, step=57 * MS, comm=1 * MS, **slow),
        rank_records(2, step=57 * MS, comm=1 * MS, **{**slow, "delay": 39 * MS}),
        rank_records(3, step=57 * MS, comm=39 * MS),
    )
    assert [r.starved for r in run.ranks] == [False, True, True, False]
    assert not any(r.straggler for r in run.ranks)
    assert run.verdict is not None
    assert run.verdict.startswith("ranks 1, 2 are starved: rank 2 gets 30% of a core")


@pytest.mark.parametrize(("extra", "flagged"), [(2.0 * MS, True), (1.9 * MS, False)])
def test_straggler_min_wait_edge(extra: float, flagged: bool) -> None:
    # A 4 ms step, waited for in every step by more than a fifth of it (0.8 ms): below
    # STRAGGLER_MIN_WAIT that is a healthy rank's lead on a busy machine, not a straggler.
    run = lockstep({"cpu": 2 * MS}, {"cpu": 2 * MS}, step=4 * MS, extra=extra)
    assert protocol.STRAGGLER_MIN_WAIT == 2 * MS
    assert run.ranks[1].straggler is flagged, run.ranks[1]
    assert run.ranks[1].others_wait == pytest.approx(extra)


def test_healthy_ranks_lead_of_a_fifth_of_a_short_step_is_no_straggler() -> None:
    # As the flake of test_three_healthy_runs_flag_nobody: 0.9 ms of a 4 ms step, 16 of 20 steps.
    lead = [0.9 * MS if k % 5 else -0.2 * MS for k in range(20)]
    run = run_of(
        rank_records(0, step=4 * MS, comm=[1 * MS + max(0.0, w) for w in lead], cpu=2 * MS),
        rank_records(1, step=4 * MS, comm=[1 * MS + max(0.0, -w) for w in lead], cpu=2 * MS),
    )
    r1 = run.ranks[1]
    assert r1.waited_for_share == pytest.approx(0.8) and r1.others_wait == pytest.approx(0.9 * MS)
    assert not r1.straggler and run.verdict == "healthy"


@pytest.mark.parametrize(("late_steps", "flagged"), [(12, True), (11, False)])
def test_a_rank_doing_more_work_needs_less_persistence(late_steps: int, flagged: bool) -> None:
    # Rank 1 computes twice as long; on a busy machine it arrives last in only some steps.
    late = [k < late_steps for k in range(20)]  # 12 of 20: STRAGGLER_WORK_PERSISTENCE
    run = run_of(
        rank_records(0, comm=[(6 if x else 0.5) * MS for x in late], cpu=8 * MS),
        rank_records(1, comm=[(0.5 if x else 6) * MS for x in late], cpu=16 * MS),
    )
    assert protocol.STRAGGLER_WORK_PERSISTENCE == 0.6
    r1 = run.ranks[1]
    assert r1.waited_for_share == pytest.approx(late_steps / 20)
    assert r1.straggler is flagged, r1
    assert "rank 1 does 2.0x the work" in (run.verdict or "")


def test_the_same_lead_without_more_work_is_no_straggler() -> None:
    late = [k < 15 for k in range(20)]  # 15 of 20, below STRAGGLER_PERSISTENCE
    run = run_of(
        rank_records(0, comm=[(6 if x else 0.5) * MS for x in late], cpu=8 * MS),
        rank_records(1, comm=[(0.5 if x else 6) * MS for x in late], cpu=8 * MS),
    )
    assert not run.ranks[1].straggler, run.ranks[1]
