"""%dist_cluster status tells the truth: its age once ready, busy ranks while a
background run goes, and a stopped cluster as stopped (no table of pids that are gone)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(120)

BACKGROUND = """%%dist_train --name status-bg --background --no-dashboard
import time
for step in range(600):
    report(step=step, loss=1.0)
    time.sleep(0.05)
"""


def status(shell: Any, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    shell.run_line_magic("dist_cluster", "status")
    return capsys.readouterr().out


def test_status_gives_the_age_and_busy_ranks_during_a_background_run(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from dist_notebook.magics.session import Session

    session = Session.for_shell(shell)
    assert session.cluster is cluster2, "another test left the session on its own cluster"
    deadline = time.monotonic() + 60
    while cluster2.owner.active_run() is not None:  # a run another test left going
        assert time.monotonic() < deadline
        time.sleep(0.1)
    out = status(shell, capsys)
    assert re.search(rf"cluster {cluster2.id}: ready for \d+ (s|min|h) \(started in ", out), out
    assert " idle" in out and " busy" not in out
    shell.run_cell(BACKGROUND)
    run = cluster2.owner.active_run()
    try:
        out = status(shell, capsys)
        assert "run status-bg in progress" in out, out
        rows = [line for line in out.splitlines() if re.match(r"\s*[01]\s", line)]
        assert len(rows) == 2 and all(line.rstrip().endswith("busy") for line in rows), out
    finally:
        deadline = time.monotonic() + 60
        while not run.metrics.records(0) and time.monotonic() < deadline:
            time.sleep(0.1)  # stopped once it trains (as the live view's Stop is)
        run.stop()
        deadline = time.monotonic() + 60
        while run.state.value in ("pending", "running"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert " busy" not in status(shell, capsys)


def test_status_of_a_stopped_cluster_lists_no_ranks(
    no_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shell = no_cluster
    shell.run_line_magic("dist_cluster", "start -n 1 --cpu")
    from dist_notebook.magics.session import Session

    cluster = Session.for_shell(shell).cluster
    pid = cluster.ranks[0].pid
    shell.run_line_magic("dist_cluster", "stop")
    out = status(shell, capsys)
    assert out.strip() == f"cluster {cluster.id}: stopped; start one with %dist_cluster start"
    assert str(pid) not in out
