"""The verdict and peak memory where a person reads them: the end's HTML table and text,
and the live text progress (the live chart's are in extension/test/chart.test.ts)."""

from __future__ import annotations

import re

from dist_notebook.display.final import final_html, memory, text_summary
from dist_notebook.display.textlive import progress_lines
from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import Record

MS = 1e-3


def starved_run() -> RunMetrics:
    """Rank 1 gets a third of a core: same CPU time, run delay 38 ms; rank 0 waits for it."""
    m = RunMetrics([0, 1])
    m.add(
        [
            Record(
                rank=r,
                step=s,
                time=1000.0 + s * 0.057,
                step_time=57 * MS,
                comm_time=(39 if r == 0 else 1) * MS,
                samples=64.0,
                metrics={"loss": 1.0},
                cpu_time=17 * MS,
                run_delay=(38 if r == 1 else 0.5) * MS,
                load=4.6,
                cores=1.0,
                peak_mem=(812e6 if r == 0 else 1.43e9),
            )
            for s in range(20)
            for r in (0, 1)
        ]
    )
    return m


SAID = (
    "verdict: rank 1 is starved: it gets 31% of a core (load 5 on 1 core); "
    "nothing to fix in the code"
)


def test_end_table_has_the_verdict_peak_memory_and_no_straggler() -> None:
    m = starved_run()
    summary = m.run_summary("r", "succeeded", 20)
    states = {0: "done", 1: "done"}
    table = final_html("r: succeeded", b"png", summary, states)
    assert f"<div class='dist-notebook-verdict'>{SAID}</div>" in table
    head = re.findall(r"<th>(.*?)</th>", table)
    assert "peak mem" in head
    col = head.index("peak mem")
    for rank, shown in ((0, "812 MB"), (1, "1.43 GB")):
        row = re.search(rf"<tr data-rank='{rank}'([^>]*)>(.*?)</tr>", table)
        assert row, table
        assert "color" not in row.group(1)  # no rank painted the straggler
        cells = re.findall(r"<td>(.*?)</td>", row.group(2))
        assert cells[col] == shown
        assert cells[-1] == ("starved" if rank == 1 else "")
    plain = text_summary("r: succeeded", summary, states).splitlines()
    assert plain[-1] == SAID
    assert plain[2].endswith("peak mem 1.43 GB starved")
    assert "straggler" not in "\n".join(plain[:-1])


def test_live_text_ends_with_the_verdict() -> None:
    m = starved_run()
    lines = progress_lines("r", m.run_summary("r", "running", 40), m, 0.0, 2.0)
    assert lines[-1] == SAID


def test_no_verdict_line_before_enough_steps() -> None:
    m = RunMetrics([0, 1])
    m.add([Record(rank=r, step=0, time=1.0, step_time=0.1) for r in (0, 1)])
    summary = m.run_summary("r", "running", 40)
    assert summary.verdict is None
    assert "verdict" not in final_html("r", b"png", summary, {})
    assert not any("verdict" in line for line in progress_lines("r", summary, m, 0.0, 1.0))


def test_memory_units() -> None:
    assert [memory(v) for v in (512, 2048, 812e6, 1.43e9)] == [
        "512 B",
        "2.05 kB",
        "812 MB",
        "1.43 GB",
    ]
