"""How the magics show rank output: line labels, folding of identical output, tables."""

from __future__ import annotations

import random
import time

import pytest

from dist_notebook.cluster.cluster import RankInfo
from dist_notebook.cluster.onranks.execute import RankOutput
from dist_notebook.magics.folding import Folder, Group
from dist_notebook.magics.output import (
    FoldingPrinter,
    LabelledPrinter,
    Table,
    fold,
    nodes_table,
    rank_label,
    rank_set,
    show_folded_streams,
    show_results,
)


def test_fold_groups_identical_text_in_first_rank_order() -> None:
    items = [(0, "a"), (1, "b"), (2, "a"), (3, "b"), (4, "c")]
    assert fold(items) == [([0, 2], "a"), ([1, 3], "b"), ([4], "c")]


def test_rank_label() -> None:
    assert rank_label([1]) == "rank 1"
    assert rank_label([0, 1, 3]) == "ranks 0,1,3"
    assert rank_label(range(64)) == "ranks 0-63"


def test_rank_set_is_compact() -> None:
    assert rank_set([*range(4), 5, *range(8, 64)]) == "0-3,5,8-63"
    assert rank_set([7, 1, 0, 1]) == "0,1,7"  # sorted, each once; a pair is not a range
    assert rank_set([3, 4, 5, 9, 10]) == "3-5,9,10"


# --- folding: the queue, with the clock given ------------------------------------------


def shown(groups: list[Group]) -> list[str]:
    return [f"[{rank_label(g.ranks)}] {g.text}" for g in groups]


def test_identical_lines_leave_once_as_soon_as_every_rank_has_printed() -> None:
    folder = Folder(range(64))
    for rank in reversed(range(64)):
        assert folder.ready(0.0) == []  # held: not every rank has printed it yet
        folder.add(rank, "stdout", "SUM 64\n", 0.0)
    # Long before any deadline: the last rank's line completed it.
    assert shown(folder.ready(0.0)) == ["[ranks 0-63] SUM 64\n"]
    assert folder.next_deadline() is None


def test_a_line_some_ranks_never_print_waits_only_until_its_deadline() -> None:
    folder = Folder(range(4), hold=0.3, extend=0.3, longest=2.0)
    folder.add(0, "stdout", "step 1\n", 10.0)
    folder.add(2, "stdout", "step 1\n", 10.1)  # a join extends the wait to 10.4
    assert folder.ready(10.35) == []
    assert shown(folder.ready(10.4)) == ["[ranks 0,2] step 1\n"]
    # The same line arriving later folds with the other late ranks, after the first.
    folder.add(1, "stdout", "step 1\n", 11.0)
    folder.add(3, "stdout", "step 1\n", 11.0)
    assert shown(folder.ready(11.0)) == ["[ranks 1,3] step 1\n"]


def test_joins_extend_the_wait_but_never_past_the_longest() -> None:
    folder = Folder(range(64), hold=0.3, extend=0.3, longest=1.0)
    out = []
    for rank in range(40):  # a rank every 0.1 s: each join extends the wait
        now = round(rank * 0.1, 3)
        folder.add(rank, "stdout", "x\n", now)
        out.append(shown(folder.ready(now)))
    assert out[:10] == [[]] * 10
    assert out[10] == ["[ranks 0-10] x\n"]  # at 1.0 s, the longest, rank 10 just in


def test_different_lines_group_by_content_in_line_then_rank_order() -> None:
    folder = Folder(range(6))
    for rank in (5, 2, 0, 4, 1, 3):  # arrival order is not rank order
        folder.add(rank, "stdout", f"loss {rank % 2}\nepoch done\n", 0.0)
    assert shown(folder.ready(0.0)) == [
        "[ranks 0,2,4] loss 0\n",
        "[ranks 1,3,5] loss 1\n",
        "[ranks 0-5] epoch done\n",
    ]


def test_a_line_waits_for_its_own_ranks_earlier_lines() -> None:
    folder = Folder(range(2), hold=0.3, extend=0.3, longest=2.0)
    folder.add(0, "stdout", "a\nb\n", 0.0)
    assert shown(folder.ready(0.5)) == ["[rank 0] a\n", "[rank 0] b\n"]
    folder.add(0, "stdout", "c\n", 1.0)
    # Rank 1's "c" joins rank 0's waiting "c", which then waits for rank 1's "a", "b".
    folder.add(1, "stdout", "a\n", 1.1)
    folder.add(1, "stdout", "b\nc\n", 1.2)
    assert shown(folder.ready(1.2)) == ["[rank 1] a\n", "[rank 1] b\n", "[ranks 0,1] c\n"]


def test_a_group_never_shows_before_a_rank_s_earlier_line() -> None:
    folder = Folder(range(3), hold=0.3, extend=0.0, longest=2.0)
    folder.add(0, "stdout", "c\n", 0.0)  # a group beginning before rank 1's "a"
    folder.add(1, "stdout", "a\nc\n", 0.1)
    # Rank 2 prints nothing. "c" is due at 0.3, but rank 1's "a" (due at 0.4) holds it.
    assert shown(folder.ready(0.35)) == []
    assert shown(folder.ready(0.4)) == ["[rank 1] a\n", "[ranks 0,1] c\n"]


def test_a_rank_repeating_a_line_gets_each_one_folded_with_the_others() -> None:
    folder = Folder(range(2))
    folder.add(0, "stdout", "tick\ntick\ntick\n", 0.0)
    folder.add(1, "stdout", "tick\ntick\n", 0.0)
    assert shown(folder.ready(0.0)) == ["[ranks 0,1] tick\n"] * 2
    folder.add(1, "stdout", "tick\n", 0.1)
    assert shown(folder.ready(0.1)) == ["[ranks 0,1] tick\n"]


def test_an_unended_line_waits_for_its_end_then_shows_alone() -> None:
    folder = Folder(range(2), hold=0.3, extend=0.3, longest=2.0)
    folder.add(0, "stdout", "loss=", 0.0)
    folder.add(1, "stdout", "loss=0.5\n", 0.0)
    folder.add(0, "stdout", "0.5\nwait", 0.1)
    assert shown(folder.ready(0.1)) == ["[ranks 0,1] loss=0.5\n"]
    assert folder.ready(0.35) == []
    assert shown(folder.ready(0.4)) == []  # now a line of its own, waiting for rank 1's
    assert shown(folder.ready(0.7)) == ["[rank 0] wait\n"]


def test_a_progress_bar_shows_its_latest_state_after_the_label() -> None:
    folder = Folder(range(2))
    folder.add(0, "stderr", "\r 10%|#  |\r 20%|## |\n", 0.0)
    folder.add(1, "stderr", "\r 15%|#  |\r 20%|## |\r\n", 0.0)  # and a \r\n ending
    assert shown(folder.ready(0.0)) == ["[ranks 0,1]  20%|## |\n"]


def test_streams_and_displays_fold_apart() -> None:
    folder = Folder(range(2))
    image = {"data": {"image/png": "iVBOR"}, "metadata": {}}
    for rank in (0, 1):
        folder.add(rank, "stdout", "same\n", 0.0)
        folder.add(rank, "stderr", "same\n", 0.0)
        folder.add(rank, "display", image, 0.0)
    groups = folder.ready(0.0)
    assert [(g.kind, g.ranks) for g in groups] == [
        ("stdout", [0, 1]),
        ("stderr", [0, 1]),
        ("display", [0, 1]),
    ]
    assert groups[2].payload == image


def test_every_rank_keeps_its_order_whatever_the_interleaving() -> None:
    """Random output from 16 ranks, arriving in random pieces at random times: every line
    shows exactly once, and each rank's lines show in the order it printed them."""
    rng = random.Random(28)
    for _ in range(50):
        printed = {
            r: [rng.choice(["a", "b", "c", f"r{r}", "tick"]) + "\n" for _ in range(8)]
            for r in range(16)
        }
        pieces = [(r, line) for r, lines in printed.items() for line in lines]
        pending = {r: list(lines) for r, lines in printed.items()}
        folder = Folder(range(16), hold=0.3, extend=0.2, longest=1.0)
        out: list[Group] = []
        now = 0.0
        for _ in pieces:
            rank = rng.choice([r for r in pending if pending[r]])
            folder.add(rank, "stdout", pending[rank].pop(0), now)
            now += rng.choice([0.0, 0.01, 0.2])
            out += folder.ready(now)
            waiting = folder._waiting  # the places agree with what must show first
            assert all(g.seq < waiting[a].seq for g in waiting.values() for a in g.after)
        out += folder.close(now)
        seen: dict[int, list[str]] = {r: [] for r in range(16)}
        for group in out:
            assert len(set(group.ranks)) == len(group.ranks)
            for rank in group.ranks:
                seen[rank].append(group.text)
        assert seen == printed


def test_ranks_far_apart_fold_in_linear_time() -> None:
    folder = Folder(range(2))
    lines = "".join(f"step {i}\n" for i in range(20_000))
    t0 = time.perf_counter()
    folder.add(0, "stdout", lines, 0.0)  # rank 0 far ahead: 20,000 lines wait for rank 1
    folder.add(1, "stdout", lines, 0.1)
    groups = folder.ready(0.1)
    took = time.perf_counter() - t0
    assert [g.ranks for g in groups] == [[0, 1]] * 20_000
    assert took < 5, f"{took:.1f} s"  # was quadratic: minutes


# --- the printer: live, labelled, a thread for deadlines -------------------------------


def wait_for_output(capsys: pytest.CaptureFixture[str], lines: int) -> tuple[str, str]:
    out = err = ""
    end = time.monotonic() + 5
    while (out + err).count("\n") < lines and time.monotonic() < end:
        time.sleep(0.01)
        got = capsys.readouterr()
        out, err = out + got.out, err + got.err
    return out, err


def test_folding_printer_prints_one_line_for_64_ranks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with FoldingPrinter(range(64), hold=30) as sink:
        for rank in range(64):
            sink(rank, "stdout", "SUM 64\n")
            sink(rank, "stderr", f"warn {rank // 32}\n")
        # Shown once the last rank's line came, long before the cell's end or a deadline.
        out, err = wait_for_output(capsys, 3)
        assert out == "[ranks 0-63] SUM 64\n"
        assert err == "[ranks 0-31] warn 0\n[ranks 32-63] warn 1\n"
    assert sink.tail(5) == "SUM 64\nwarn 0\n"


def test_folding_printer_shows_a_held_line_without_new_output(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sink = FoldingPrinter(range(4), hold=0.1)
    try:
        sink(0, "stdout", "only rank 0\n")
        assert capsys.readouterr().out == ""
        # The thread shows it at its deadline, with no new output and the cell running.
        assert wait_for_output(capsys, 1) == ("[rank 0] only rank 0\n", "")
    finally:
        sink.close()


def test_closing_shows_what_is_held(capsys: pytest.CaptureFixture[str]) -> None:
    sink = FoldingPrinter(range(4), hold=60)
    sink(1, "stdout", "x\n")
    sink(2, "stdout", "x\npartial")
    sink.close()
    assert capsys.readouterr().out == "[ranks 1,2] x\n[rank 2] partial\n"


def test_labelled_printer_prefixes_every_line(capsys: pytest.CaptureFixture[str]) -> None:
    sink = LabelledPrinter()
    sink(0, "stdout", "one\ntwo\n")
    sink(1, "stderr", "oops\n")
    out = capsys.readouterr()
    assert out.out == "[rank 0] one\n[rank 0] two\n"
    assert out.err == "[rank 1] oops\n"


def test_labelled_printer_continues_a_partial_line(capsys: pytest.CaptureFixture[str]) -> None:
    sink = LabelledPrinter()
    sink(0, "stdout", "loss=")
    sink(1, "stdout", "x\n")
    sink(0, "stdout", "0.5\nnext\n")
    assert capsys.readouterr().out == "[rank 0] loss=[rank 1] x\n0.5\n[rank 0] next\n"


def outputs(*stdouts: str) -> list[RankOutput]:
    return [RankOutput(rank=i, stdout=text) for i, text in enumerate(stdouts)]


def test_no_stream_folds_identical_output(capsys: pytest.CaptureFixture[str]) -> None:
    show_folded_streams(outputs("same\n", "same\n"))
    assert capsys.readouterr().out == "[ranks 0,1]\nsame\n"


def test_no_stream_keeps_different_output_apart(capsys: pytest.CaptureFixture[str]) -> None:
    show_folded_streams(outputs("a", "b", "a", ""))
    assert capsys.readouterr().out == "[ranks 0,2]\na\n[rank 1]\nb\n"


def test_no_stream_no_fold_is_per_rank(capsys: pytest.CaptureFixture[str]) -> None:
    show_folded_streams(outputs("a", "a"), folded=False)
    assert capsys.readouterr().out == "[rank 0]\na\n[rank 1]\na\n"


def test_results_are_folded(capsys: pytest.CaptureFixture[str]) -> None:
    outs = outputs("", "", "")
    for o, text in zip(outs, ["2", "2", "3"], strict=True):
        o.result = {"data": {"text/plain": text}}
    show_results(outs)
    assert capsys.readouterr().out == "Out[ranks 0,1]: 2\nOut[rank 2]: 3\n"


def test_table_text_and_html() -> None:
    table = Table(("rank", "pid"), [(0, 11), (1, 2222)], "cluster x")
    assert repr(table).splitlines() == ["cluster x", "rank  pid ", "0     11  ", "1     2222"]
    html = table._repr_html_()
    assert "<caption>cluster x</caption>" in html and "<td>2222</td>" in html


def test_nodes_table_is_a_row_per_node() -> None:
    states_of = {13: "busy", 14: "busy", 40: "dead"}
    ranks = [
        RankInfo(
            r, r, f"gpu{r // 8}", 100 + r, f"cuda:{r % 8}", "nccl", states_of.get(r, "idle"), r // 8
        )
        for r in range(64)
    ]
    table = nodes_table(ranks, "cluster x: ready, 64 ranks")
    assert [row[:5] for row in table.rows] == [
        [str(n), f"gpu{n}", f"{8 * n}-{8 * n + 7}", "8", "cuda:0-7"] for n in range(8)
    ]
    states = {row[0]: row[6] for row in table.rows}
    assert states["0"] == "8 idle"
    assert states["1"] == "2 busy, 6 idle"  # the rarest state first: what needs a look
    assert states["5"] == "1 dead, 7 idle"
    cpu = nodes_table([RankInfo(r, r, "vm", r, "cpu", "gloo") for r in range(16)], "t")
    assert cpu.rows == [["0", "vm", "0-15", "16", "cpu", "gloo", "16 idle"]]


def test_table_escapes_html() -> None:
    assert "&lt;b&gt;" in Table(("a",), [("<b>",)])._repr_html_()
