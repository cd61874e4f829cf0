"""A report() flood: a tight report() loop on 2 ranks for some seconds. Every record a
rank sent is in the store when the run says succeeded (the end waits while records still
arrive; the ranks are held back when the kernel cannot keep up), and a run that did lose
records says how many of which rank (rank side: tests/training/test_report_backpressure.py).
Run again with two CPU hogs beside the ranks by make test's second pass."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from IPython.utils.capture import capture_output

from dist_notebook.store import StoreReader
from dist_notebook.training import load_run

pytestmark = pytest.mark.timeout(240)

FLOOD = """%%dist_train --no-dashboard --name {name}{flags}
import time as _time
_n = 0
_end = _time.monotonic() + 10
while _time.monotonic() < _end:
    report(step=_n, loss=0.5)
    _n += 1
print("SENT", _n)
"""


def stored(store: str, run_id: str) -> dict[int, int]:
    conn = sqlite3.connect(store)
    try:
        rows = conn.execute(
            "SELECT rank, COUNT(*) FROM metrics WHERE run_id = ? GROUP BY rank", (run_id,)
        ).fetchall()
    finally:
        conn.close()
    return {int(rank): int(count) for rank, count in rows}


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_a_flood_of_records_is_stored_whole(
    shell: Any, cluster2: Any, throwaway_store: str, background: bool
) -> None:
    magics = shell.magics_manager.registry["TrainMagics"]
    magics.last_result = None
    name = f"flood-{'bg' if background else 'fg'}"
    with capture_output() as out:
        result = shell.run_cell(
            FLOOD.format(name=name, flags=" --background" if background else "")
        )
        deadline = time.monotonic() + 180
        while magics.last_result is None:
            assert time.monotonic() < deadline, "the run never ended"
            time.sleep(0.2)
    assert result.error_in_exec is None, result.error_in_exec
    text = out.stdout + out.stderr
    sent = {int(r): int(n) for r, n in re.findall(r"\[(?:rank )?(\d+)\][^\n]*SENT (\d+)", text)}
    assert set(sent) == {0, 1}, text[-2000:]
    assert min(sent.values()) > 10_000, sent  # a flood, not a trickle
    run = magics.last_result
    assert run.state.value == "succeeded", (run, text[-2000:])
    assert run.lost == "", run.lost
    assert "records lost" not in text
    assert stored(throwaway_store, run.run_id) == sent
    # For the report: what each rank sent (all of it stored) and how long the run took.
    print(f"{name}: sent and stored {sent}, run {run.ended - run.started:.1f} s")
    stored_run = load_run(name)
    assert stored_run.state == "succeeded"
    row = StoreReader(Path(throwaway_store)).run(stored_run.id)
    assert row is not None and row["error"] is None
