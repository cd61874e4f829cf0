"""Busy processes beside the ranks: the load under which timing bugs show.

The %dist_run hang of 2026-12-01 showed only with two busy processes beside the ranks
on a 2-core machine. ``CpuHogs(2)`` starts two such processes (each a Python loop that
never sleeps) and ends them; the suite runs its reliability tests once more under them
when ``DIST_NOTEBOOK_TEST_CPU_HOGS`` names a count (see the Makefile's test target).
"""

from __future__ import annotations

import os
import subprocess
import sys

ENV_VAR = "DIST_NOTEBOOK_TEST_CPU_HOGS"


class CpuHogs:
    def __init__(self, count: int) -> None:
        self.procs = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)
        ]

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait(timeout=10)
        self.procs = []


def from_environment() -> CpuHogs | None:
    value = os.environ.get(ENV_VAR, "")
    return CpuHogs(int(value)) if value.isdigit() and int(value) > 0 else None
