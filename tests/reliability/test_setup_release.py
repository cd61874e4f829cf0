"""A run whose set-up fails gives the cluster back at once.

``%%dist_train --steps 99999999999999999999`` raised a raw OverflowError from the run
store after the run had claimed the cluster; the claim stayed, and every later
%%dist_train, %dist_push and %dist_pull was refused for a run 'in progress' that never
began, until %dist_cluster stop. Now such a number is refused by the flag, and whatever
fails in a run's set-up (the store's add_run, the live view, the history) ends the run
failed and releases its claim: the next run, push and pull go on.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from IPython.core.error import UsageError

from dist_notebook.store import StoreWriter
from dist_notebook.training.run import RunSpec, TrainingRun

pytestmark = pytest.mark.timeout(240)

SHORT = "%%dist_train --name {name} --no-dashboard\nreport(step=0, loss=1.0)\n"


def still_usable(shell: Any, cluster: Any, name: str) -> None:
    """The next run trains, and a push and a pull are not refused."""
    assert cluster.owner.active_run() is None
    started = time.monotonic()
    result = shell.run_cell(SHORT.format(name=name))
    assert result.error_in_exec is None, result.error_in_exec
    assert time.monotonic() - started < 120
    magics = shell.magics_manager.registry["TrainMagics"]
    assert magics.last_result is not None and magics.last_result.name == name
    assert magics.last_result.state.value == "succeeded"
    shell.user_ns["released_value"] = 41
    shell.run_line_magic("dist_push", "released_value")
    assert shell.run_line_magic("dist_pull", "released_value + 1 --rank 1") == 42


def test_a_twenty_digit_steps_is_refused_and_the_next_run_trains(shell: Any, cluster2: Any) -> None:
    with pytest.raises(UsageError, match=r"--steps: 99999999999999999999 is out of range"):
        shell.run_cell_magic(
            "dist_train", "--steps 99999999999999999999", "report(step=0, loss=1.0)"
        )
    still_usable(shell, cluster2, "after-steps")


def test_a_store_that_raises_in_the_set_up_leaves_no_claim(
    shell: Any, cluster2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's add_run raising what it raised for a 20-digit step count (a value it
    cannot hold), through the API and through the magic."""

    def overflow(*_args: Any, **_kwargs: Any) -> None:
        raise OverflowError("Python int too large to convert to SQLite INTEGER")

    monkeypatch.setattr(StoreWriter, "add_run", overflow)
    with pytest.raises(OverflowError):
        TrainingRun(cluster2, RunSpec(code="pass", name="api-setup"), writer=cluster2.writer())
    assert cluster2.owner.active_run() is None
    with pytest.raises(OverflowError):
        shell.run_cell_magic("dist_train", "--name magic-setup --no-dashboard", "pass")
    assert cluster2.owner.active_run() is None
    monkeypatch.undo()
    still_usable(shell, cluster2, "after-store")


def test_a_live_view_that_fails_to_show_leaves_no_claim(
    shell: Any, cluster2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dist_notebook.display import Dashboard

    def broken(self: Any) -> None:
        raise RuntimeError("the front end refused the widget")

    monkeypatch.setattr(Dashboard, "show", broken)
    for flags in ("--name view-setup", "--name view-setup-bg --background"):
        with pytest.raises(RuntimeError, match="refused the widget"):
            shell.run_cell_magic("dist_train", flags, "report(step=0, loss=1.0)")
        assert cluster2.owner.active_run() is None
        abandoned = cluster2.owner.run  # set by the run's claim
        assert abandoned.name == flags.split()[1] and abandoned.state.value == "failed"
    monkeypatch.undo()
    still_usable(shell, cluster2, "after-view")
