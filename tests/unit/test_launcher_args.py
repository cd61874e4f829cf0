"""The options every engine and the controller get: waits that follow the start's.

On a loaded 2-core machine starting 64 engines, the controller forgot one engine whose
first heartbeat came more than 30 s (ipyparallel's default) after its registration
reply; that engine lived on unregistered and the start timed out with 63 of 64. The
controller now waits as long as the start, and an engine waits for the controller's
registration reply up to a minute (ipyparallel: 5 s)."""

from __future__ import annotations

import pytest

from dist_notebook.cluster.launchers import controller_args, engine_args
from dist_notebook.cluster.spec import ClusterSpec


def option(args: list[str], name: str) -> str:
    found = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    assert len(found) == 1, args
    return found[0]


@pytest.mark.parametrize("timeout", [10.0, 120.0, 400.0])
def test_the_controller_waits_for_a_first_heartbeat_as_long_as_the_start(timeout: float) -> None:
    args = controller_args(ClusterSpec(n=2, start_timeout=timeout))
    assert int(option(args, "IPController.registration_timeout")) == max(30, int(timeout))
    assert option(args, "HeartMonitor.period") == "500"


@pytest.mark.parametrize(("timeout", "wait"), [(2.0, 5.0), (30.0, 30.0), (400.0, 60.0)])
def test_an_engine_waits_for_its_registration_reply_up_to_a_minute(
    timeout: float, wait: float
) -> None:
    args = engine_args(ClusterSpec(n=2, start_timeout=timeout))
    assert float(option(args, "IPEngine.timeout")) == wait
    assert "--IPEngine.enable_nanny=False" in args  # local engines: no nanny


def test_remote_engines_keep_their_nanny() -> None:
    spec = ClusterSpec(n=2, launcher="ssh", hosts=(("h1", 1), ("h2", 1)))
    assert not any("enable_nanny" in a for a in engine_args(spec))
