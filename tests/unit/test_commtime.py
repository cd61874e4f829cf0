"""commtime: each report's comm_time is its own step's on CPU, DDP's smoothed sample on GPU.

DDP's logging data is stood in for by an object with the same method (the real reducer is
exercised by the cluster tests: tests/training/test_dist_train.py, test_straggler.py)."""

from __future__ import annotations

import weakref
from typing import Any

import pytest

from dist_notebook.engine import commtime


class Reducer:
    """What commtime reads of a DDP model: its iteration, last sampled comm span and the
    part of it that overlapped the rank's own backward. As DDP's, the logging data holds
    a CPU iteration's timings only once its logger wrote them (at the next forward, or
    when commtime asks at report())."""

    def __init__(self) -> None:
        self.iteration = 0
        self.comm_ns = 0
        self.overlap_ns = 0
        self.logged: dict[str, Any] = {}
        self.logger = self
        self.asked = 0  # set_runtime_stats_and_log calls by commtime

    def step(self, comm_ms: float, overlap_ms: float = 0.0) -> None:
        self.iteration += 1
        self.comm_ns = int(comm_ms * 1e6)
        self.overlap_ns = int(overlap_ms * 1e6)

    def set_runtime_stats_and_log(self) -> None:
        self.asked += 1
        self.log_as_ddp()

    def log_as_ddp(self) -> None:
        """What DDP writes at its next forward."""
        self.logged = {
            "iteration": self.iteration,
            "backward_comm_time": self.comm_ns,
            "backward_compute_comm_overlap_time": self.overlap_ns,
        }

    def _get_ddp_logging_data(self) -> Any:
        return self

    @property
    def ints_map(self) -> dict[str, Any]:
        return dict(self.logged)


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Reducer:
    monkeypatch.setattr(commtime, "_models", weakref.WeakSet())
    monkeypatch.setattr(commtime, "_on_gpu", weakref.WeakSet())
    monkeypatch.setattr(commtime, "_estimate", commtime._Estimate())
    reducer = Reducer()
    commtime._models.add(reducer)
    return reducer


def test_on_cpu_every_report_carries_its_own_steps_span(model: Reducer) -> None:
    spans = [3.0, 11.0, 2.0, 9.0, 4.0]  # who waits changes from step to step
    got = []
    for i, span in enumerate(spans):
        model.step(span)
        got.append(commtime.comm_metrics(now=100.0 + 0.01 * i)["comm_time"] * 1e3)
    assert got == pytest.approx(spans), "no smoothing, no stale sample between reads"


def test_comm_time_is_the_wait_after_the_ranks_own_backward(model: Reducer) -> None:
    # a 12 ms span whose first 9 ms ran beside this rank's backward: 3 ms waited
    model.step(12.0, overlap_ms=9.0)
    assert commtime.comm_metrics(now=100.0)["comm_time"] == pytest.approx(0.003)
    model.step(5.0, overlap_ms=7.0)  # clocks of a busy machine: never below zero
    assert commtime.comm_metrics(now=100.01)["comm_time"] == 0.0


def test_a_loop_reporting_every_fourth_iteration_gets_four_spans(model: Reducer) -> None:
    per_report = []
    for i in range(12):
        for _ in range(4):
            model.step(2.0)
        per_report.append(commtime.comm_metrics(now=100.0 + i)["comm_time"] * 1e3)
    # counted once 20 iterations were seen (the sixth report): 4 iterations a report
    assert per_report[0] == pytest.approx(2.0)
    assert per_report[-1] == pytest.approx(8.0)


def test_on_a_gpu_samples_are_smoothed_and_read_at_most_every_refresh(model: Reducer) -> None:
    commtime._on_gpu.add(model)
    model.step(10.0)
    model.log_as_ddp()
    assert commtime.comm_metrics(now=100.0)["comm_time"] == pytest.approx(0.010)
    model.step(30.0)
    model.log_as_ddp()
    # within REFRESH_SECONDS: not read again
    assert commtime.comm_metrics(now=100.1)["comm_time"] == pytest.approx(0.010)
    later = 100.0 + commtime.REFRESH_SECONDS + 0.01
    assert commtime.comm_metrics(now=later)["comm_time"] == pytest.approx(0.020)  # halfway
    assert model.asked == 0, "on a GPU report() never has DDP read its CUDA events (a sync)"


def test_a_model_that_does_not_train_in_the_run_adds_nothing(model: Reducer) -> None:
    earlier = Reducer()  # an earlier cell's model: its last step waited 300 ms
    earlier.step(300.0)
    earlier.log_as_ddp()
    commtime._models.add(earlier)
    model.step(1.0)  # trained before the run too: counted once it trains in the run
    commtime._estimate.begin()
    got = []
    for i in range(3):
        model.step(4.0)
        got.append(commtime.comm_metrics(now=100.0 + 0.01 * i)["comm_time"] * 1e3)
    assert got == pytest.approx([4.0] * 3), "the idle model's 300 ms is no step of this run"
    earlier.step(7.0)  # it trains again: its wait counts in that step only
    model.step(4.0)
    assert commtime.comm_metrics(now=101.0)["comm_time"] * 1e3 == pytest.approx(11.0)
    model.step(4.0)
    assert commtime.comm_metrics(now=101.01)["comm_time"] * 1e3 == pytest.approx(4.0)


def test_on_a_gpu_only_the_models_sampled_in_the_run_count(model: Reducer) -> None:
    commtime._on_gpu.add(model)
    earlier = Reducer()
    earlier.step(300.0)
    earlier.log_as_ddp()
    commtime._models.add(earlier)
    commtime._on_gpu.add(earlier)
    commtime._estimate.begin()
    model.step(10.0)
    model.log_as_ddp()
    assert commtime.comm_metrics(now=100.0)["comm_time"] == pytest.approx(0.010)
