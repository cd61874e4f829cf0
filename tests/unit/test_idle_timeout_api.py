"""A detached cluster's idle timeout through the API is bounded as the magic's
``--idle-timeout`` is: refused in one line before any keeper starts."""

from __future__ import annotations

import math
import subprocess

import pytest

from dist_notebook.cluster import ClusterConfigError, ClusterSpec, limits
from dist_notebook.detached.attached import start_detached
from dist_notebook.magics import args


@pytest.mark.parametrize("bad", [0, -5, math.nan, math.inf, 10**400, 366 * 86400.0, "2h", True])
def test_an_idle_timeout_out_of_range_is_refused_before_a_keeper_starts(
    bad: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_keeper(*a: object, **k: object) -> None:
        raise AssertionError("a keeper was started for a refused idle timeout")

    monkeypatch.setattr(subprocess, "Popen", no_keeper)
    with pytest.raises(ClusterConfigError) as refused:
        start_detached(ClusterSpec(n=2), bad)  # type: ignore[arg-type]
    message = str(refused.value)
    assert "\n" not in message and "idle_timeout=" in message, message
    assert "None for never" in message, message


@pytest.mark.parametrize("good", [None, 0.5, 90, 3600.0, 365 * 86400.0])
def test_an_idle_timeout_in_range_passes(good: float | None) -> None:
    assert limits.check_idle_timeout(good) == good


def test_the_api_and_the_magic_share_the_bound() -> None:
    assert limits.MAX_IDLE_SECONDS == args.MAX_IDLE_SECONDS
