"""What would wait for a whole background run, or end it, is refused at once in one line;
a scale asks for no more ranks than the machine holds; the panel's Stop during a scale
acts after it instead of taking its engines from under it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from IPython.core.error import UsageError

from dist_notebook.cluster.scale import scale_sync

pytestmark = pytest.mark.timeout(180)

LONG_BACKGROUND = """%%dist_train --name {name} --background --no-dashboard
import time
for step in range(600):
    report(step=step, loss=1.0)
    time.sleep(0.05)
"""


def refusal(fn: Any, *args: Any) -> str:
    t0 = time.monotonic()
    with pytest.raises(UsageError) as caught:
        fn(*args)
    assert time.monotonic() - t0 < 5, "refused at once, not after the run"
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_scale_push_and_pull_during_a_background_run_are_refused(shell: Any, cluster2: Any) -> None:
    started = shell.run_cell(LONG_BACKGROUND.format(name="bgbusy"))
    assert started.error_in_exec is None, started.error_in_exec
    run = cluster2.owner.active_run()
    assert run is not None and run.name == "bgbusy"
    try:
        shell.user_ns["lr"] = 0.1
        for fn, args, doing in (
            (shell.run_line_magic, ("dist_cluster", "scale 3"), "cannot scale to 3 ranks"),
            (shell.run_line_magic, ("dist_cluster", "scale 1"), "cannot scale to 1 ranks"),
            (shell.run_line_magic, ("dist_push", "lr"), "cannot push to the ranks"),
            (shell.run_line_magic, ("dist_pull", "rank"), "cannot pull from the ranks"),
            (
                shell.run_cell_magic,
                ("dist_train", "--steps 3", "report(step=0, loss=1.0)"),
                "%%dist_train: cannot start another run",
            ),
        ):
            message = refusal(fn, *args)
            assert message.startswith(doing) and "run bgbusy trains in the background" in message
            assert "stop it" in message
        assert run.state.value in ("pending", "running") and cluster2.n == 2  # untouched
        assert cluster2.owner.active_run() is run  # the refused run was never made
    finally:
        run.stop()
        deadline = time.monotonic() + 60
        while run.state.value in ("pending", "running"):
            assert time.monotonic() < deadline, "the cancelled run never ended"
            time.sleep(0.1)
    assert shell.run_line_magic("dist_pull", "rank + 1 --rank 1") == 2  # usable again


def test_scale_beyond_the_machine_is_refused_as_start_is(shell: Any, cluster2: Any) -> None:
    message = refusal(shell.run_line_magic, "dist_cluster", "scale 10000")
    assert message.startswith("scale 10000 is more ranks than this machine can hold")
    assert "use scale " in message and "or fewer" in message
    assert cluster2.n == 2 and cluster2.state.value == "ready"


def test_a_background_run_stopped_at_once_ends_cancelled(shell: Any, cluster2: Any) -> None:
    """Stop right after the start, five times (the interrupt meets the run's set-up on a
    rank, or its cell, or an idle rank in between): the run ends cancelled every time,
    nothing raises in its thread, the ranks take the next cell."""
    errors: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)  # type: ignore[assignment]
    try:
        for i in range(5):
            started = shell.run_cell(LONG_BACKGROUND.format(name=f"bgstop{i}"))
            assert started.error_in_exec is None, started.error_in_exec
            run = cluster2.owner.active_run()
            time.sleep(0.05 * i)  # each lands at another point of the set-up
            run.stop()
            deadline = time.monotonic() + 60
            while run.state.value in ("pending", "running"):
                assert time.monotonic() < deadline, f"run {i} never ended: {run.state}"
                time.sleep(0.05)
            assert run.state.value == "cancelled", (i, run.state)
            assert shell.run_line_magic("dist_pull", "rank + 1 --rank 1") == 2
    finally:
        threading.excepthook = previous
    assert errors == []


def test_panel_stop_during_a_scale_acts_after_it(own_cluster: Any) -> None:
    """The owner's stop (what the panel's Stop runs, on the owner's thread) waits for the
    scale under way, which ends ready; then the cluster stops."""
    cluster = own_cluster
    stopped: dict[str, Any] = {}

    def panel_stop() -> None:
        deadline = time.monotonic() + 30
        while cluster.state.value != "restarting" and time.monotonic() < deadline:
            time.sleep(0.01)
        stopped["seen"] = cluster.state.value
        stopped["result"] = cluster.owner.stop(reason="Stop in the JupyterLab panel")

    thread = threading.Thread(target=panel_stop)
    thread.start()
    scale_sync(cluster, 3)  # no error: the stop did not take its engines away
    assert cluster.n == 3
    thread.join(60)
    assert stopped == {"seen": "restarting", "result": "stopped"}
    assert cluster.state.value == "stopped"
