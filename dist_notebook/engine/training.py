"""Engine side of a training run: open the metrics channel, instrument DDP, close."""

from __future__ import annotations

from . import commtime, reporter


def begin_run(endpoint: str, key: bytes, run_id: str) -> None:
    reporter.open_channel(endpoint, key, run_id)
    commtime.install()


def end_run() -> int:
    """Close the run on this rank; return how many records it sent."""
    commtime.uninstall()
    return reporter.close_channel()
