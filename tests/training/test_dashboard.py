"""The dashboard's throttle: redraws never run on the collector's thread, and come in
bursts of at most one per window however many records arrive."""

from __future__ import annotations

import threading
import time
from typing import Any

from dist_notebook.display import dashboard as dashboard_module
from dist_notebook.display.dashboard import Dashboard
from dist_notebook.metrics import RunMetrics

from .conftest import wait_for


class StandInRun:
    """What the dashboard reads from a TrainingRun (no cluster needed to test drawing)."""

    def __init__(self) -> None:
        self.name = "stand-in"
        self.metrics = RunMetrics([0, 1])
        self.rank_states = {0: "running", 1: "running"}
        self.state = type("State", (), {"value": "running"})()
        self.listeners: list[Any] = []

    def on_state(self, listener: Any) -> None:
        self.listeners.append(listener)

    def stop(self) -> None:
        pass


def records(step: int) -> list[dict[str, Any]]:
    return [
        {"rank": r, "step": step, "time": 1000.0 + step, "loss": 1.0 / (step + 1)} for r in (0, 1)
    ]


def test_records_never_wait_for_a_redraw() -> None:
    run = StandInRun()
    board = Dashboard(run)
    drew_on: list[str] = []
    render = board.render

    def tracked(picture: bool = True) -> None:
        drew_on.append(threading.current_thread().name)
        render(picture)

    board.render = tracked  # type: ignore[method-assign]
    run.metrics.add(records(0))
    assert board.renders == 0, "add() returned only after a redraw"
    wait_for(lambda: board.renders == 1, 5, "the deferred redraw")
    assert drew_on and threading.current_thread().name not in drew_on
    board.finish()


def test_a_burst_of_records_gives_one_redraw_per_window(monkeypatch: Any) -> None:
    monkeypatch.setattr(dashboard_module, "MAX_FPS", 2.0)
    monkeypatch.setattr(dashboard_module, "MAX_BUSY", 1.0)  # the window alone sets the pace
    run = StandInRun()
    board = Dashboard(run)
    run.metrics.add(records(0))
    wait_for(lambda: board.renders == 1, 5, "the first redraw")
    for step in range(1, 200):
        run.metrics.add(records(step))
    time.sleep(0.2)
    assert board.renders == 1, "redrew inside the throttle window"
    wait_for(lambda: board.renders == 2, 5, "the redraw after the window")
    assert ">199<" in board.table.value
    board.finish()
    renders = board.renders
    run.metrics.add(records(200))
    time.sleep(0.7)
    assert board.renders == renders, "redrew after finish()"


def test_slow_pictures_are_spaced_out_but_the_text_is_not(monkeypatch: Any) -> None:
    monkeypatch.setattr(dashboard_module, "MAX_BUSY", 0.1)
    run = StandInRun()
    board = Dashboard(run)
    png = board._figure.draw(run.metrics, run.metrics.summaries())
    pictures: list[float] = []

    def slow_draw(*args: Any) -> bytes:
        time.sleep(0.1)  # a picture that takes 0.1 s, whatever this machine's speed
        pictures.append(time.monotonic())
        return png

    board._figure.draw = slow_draw  # type: ignore[method-assign]
    board.render()  # took ~0.1 s: the next picture waits ~1 s (10% of a core)
    t0 = time.monotonic()
    run.metrics.add(records(0))
    # The table shows the new step within the text's own window...
    wait_for(lambda: ">0<" in board.table.value, 1, "the text update")
    assert len(pictures) == 1, "the picture was redrawn inside its CPU budget"
    # ...and the picture follows once its budget allows.
    wait_for(lambda: len(pictures) == 2, 5, "the spaced picture")
    assert pictures[1] - t0 > 0.8
    board.finish()


def test_a_blocking_run_says_how_to_stop_it() -> None:
    # A plain %%dist_train cell holds the kernel, which then reads no widget messages:
    # the button must not pretend to work, and must name what does.
    board = Dashboard(StandInRun(), blocking=True)
    assert board.stop_button.disabled
    assert "interrupt" in board.stop_button.description
    assert "--background" in board.stop_button.tooltip
    background = Dashboard(StandInRun(), blocking=False)
    assert not background.stop_button.disabled
    board.finish()
    background.finish()
