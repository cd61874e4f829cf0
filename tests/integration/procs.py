"""Helpers to check which of our processes are still alive."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import psutil


def alive(pid: int) -> bool:
    """True while *pid* runs (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait up to *timeout* seconds for every pid to exit; return those still alive."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def cluster_pids(cluster: Any) -> dict[str, list[int]]:
    """Engine pids (from the ranks) and the controller's pid (from its launcher)."""
    return {
        "engines": [r.pid for r in cluster.ranks],
        "controller": [cluster.engines.controller_pid],
    }


def kill_all(pids: Iterable[int]) -> None:
    """Clean-up after a failed test: end the processes this test started."""
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
