"""An MLflow server that cannot be reached fails the export in seconds, not a minute."""

from __future__ import annotations

import os
import socket
import time

import pytest

from dist_notebook.export.base import RunInfo
from dist_notebook.export.mlflow import UNREACHABLE_DEFAULTS, MlflowTarget

pytest.importorskip("mlflow")


def test_an_unreachable_server_fails_the_export_within_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in UNREACHABLE_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as sock:  # a loopback port with nobody listening on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    target = MlflowTarget(RunInfo(run_id="r1", name="unreachable"), f"http://127.0.0.1:{port}")
    t0 = time.monotonic()
    with pytest.raises(Exception, match="127.0.0.1"):
        target.start()
    took = time.monotonic() - t0
    assert took < 15, f"the export took {took:.1f} s to fail (MLflow's own retries: ~60 s)"
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
