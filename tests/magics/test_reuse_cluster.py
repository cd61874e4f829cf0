"""A second "Run All": ``%dist_cluster start`` with the ready cluster's own spec reuses it
with a one-line note; another spec still says to restart or stop first."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import session_of
from IPython.core.error import UsageError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_the_same_start_twice_reuses_the_ready_cluster(
    shell: Any, cluster2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    pids = [r.pid for r in cluster2.ranks]
    capsys.readouterr()
    shell.run_line_magic("dist_cluster", "start -n 2 --cpu")
    out = capsys.readouterr().out
    assert f"cluster {cluster2.id} is already ready with this spec: reusing it" in out, out
    assert session_of(shell).cluster is cluster2
    assert [r.pid for r in cluster2.ranks] == pids  # the same engines, nothing restarted
    shell.run_cell_magic("dist", "", "reused = rank")
    assert shell.run_line_magic("dist_pull", "reused --all") == {0: 0, 1: 1}


def test_another_spec_while_ready_says_what_to_do(shell: Any, cluster2: Any) -> None:
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("dist_cluster", "start -n 3 --cpu")
    assert "a cluster is already ready: use %dist_cluster restart" in str(info.value)
    assert session_of(shell).cluster is cluster2
