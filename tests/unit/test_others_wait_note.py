"""The end's table says what a negative "others wait ms" means (it read as a mistake): a
line under the table when a rank's value is below 0, none when every value is 0 or more."""

from __future__ import annotations

from dist_notebook.display.final import OTHERS_WAIT_NOTE, final_html
from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import Record


def summary_with(waits: list[float]):  # type: ignore[no-untyped-def]
    m = RunMetrics(list(range(len(waits))))
    m.add(
        [
            Record(rank=r, step=s, time=1000.0 + s * 0.1, step_time=0.1, metrics={"loss": 1.0})
            for s in range(5)
            for r in range(len(waits))
        ]
    )
    summary = m.run_summary("r1", "succeeded", 5)
    for rank, wait in zip(summary.ranks, waits, strict=True):
        rank.others_wait = wait
    return summary


def test_a_negative_others_wait_is_explained_under_the_table() -> None:
    html = final_html("r: succeeded", b"", summary_with([0.004, -0.002]), {})
    assert "<td>-2.0</td>" in html, html
    assert (
        OTHERS_WAIT_NOTE in html
        and "below 0, it arrives first and waits for them" in OTHERS_WAIT_NOTE
    )


def test_no_note_when_no_rank_waits_for_the_others() -> None:
    html = final_html("r: succeeded", b"", summary_with([0.004, 0.0]), {})
    assert OTHERS_WAIT_NOTE not in html
    # a wait that the table rounds to -0.0 is no wait either
    html = final_html("r: succeeded", b"", summary_with([0.004, -0.00002]), {})
    assert OTHERS_WAIT_NOTE not in html
