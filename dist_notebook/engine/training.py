"""Engine side of a training run: open the metrics channel, instrument DDP, close."""

from __future__ import annotations

from typing import Any

from . import checkpoint, commtime, datawait, gpu, reporter


def begin_run(
    endpoint: str, key: bytes, run_id: str, checkpoints: dict[str, Any] | None = None
) -> None:
    reporter.open_channel(endpoint, key, run_id)
    commtime.install()
    datawait.install()  # a step's wait for a DataLoader's batch: the record's data_time
    gpu.start_sampler()  # GPU ranks only: utilisation, memory, power in the records
    checkpoint.configure(**(checkpoints or {"every": None, "directory": None, "resume": False}))


def end_run() -> int:
    """Close the run on this rank; return how many records it sent."""
    commtime.uninstall()
    datawait.uninstall()
    gpu.stop_sampler()
    return reporter.close_channel()
