"""The GPU sampler's CPU side: nothing starts on a CPU rank, UUIDs of NVML and CUDA
compare as one, and a GPU that NVML cannot read is said once, without stopping the run.

The sampler reading a real device is tested on a GPU host in tests/gpu/test_gpu_metrics.py.
"""

from __future__ import annotations

import logging

import pytest

from dist_notebook.engine import gpu, reporter


def test_nvml_and_cuda_uuids_compare_as_one() -> None:
    nvml_form = "GPU-5B4F9E0C-1A2B-3C4D-5E6F-0123456789AB"
    cuda_form = "5b4f9e0c-1a2b-3c4d-5e6f-0123456789ab"
    assert gpu.normalise_uuid(nvml_form) == gpu.normalise_uuid(cuda_form) == cuda_form
    assert gpu.normalise_uuid(" gpu-abc ") == "abc"


def test_a_cpu_rank_starts_no_sampler_and_adds_no_hook() -> None:
    # This process is a CPU process: torch has no CUDA device initialised here.
    assert gpu.cuda_uuid() is None
    hooks = reporter.step_hooks()
    assert gpu.start_sampler() is None
    assert reporter.step_hooks() == hooks
    gpu.stop_sampler()  # nothing to stop: no error


def test_a_device_nvml_cannot_read_is_said_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    # A UUID given as a GPU rank would, on a host where NVML has no library or no such
    # device: the run goes on without GPU fields, and the log says why.
    hooks = reporter.step_hooks()
    with caplog.at_level(logging.WARNING, logger="dist_notebook"):
        assert gpu.start_sampler("GPU-00000000-0000-0000-0000-000000000000") is None
    assert reporter.step_hooks() == hooks
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "no GPU metrics" in said, said


@pytest.mark.timeout(120)
def test_records_of_cpu_ranks_carry_no_gpu_fields(cluster2: object) -> None:
    from dist_notebook.training import RunSpec, TrainingRun

    code = "for step in range(5):\n    report(step=step, samples=1, loss=1.0 / (step + 1))\n"
    run = TrainingRun(cluster2, RunSpec(code=code, name="cpu-no-gpu"))
    assert run.run().state.value == "succeeded"
    for rank in (0, 1):
        records = run.metrics.records(rank)
        assert len(records) == 5 and all(r.gpu is None for r in records)
        summary = run.metrics.summary(rank)
        assert (summary.gpu_util, summary.gpu_mem, summary.gpu_power) == (None, None, None)
