"""How the magics show rank output: line labels, folding of identical output, tables."""

from __future__ import annotations

import pytest

from dist_notebook.cluster.execute import RankOutput
from dist_notebook.magics.output import (
    LabelledPrinter,
    Table,
    fold,
    rank_label,
    show_folded_streams,
    show_results,
)


def test_fold_groups_identical_text_in_first_rank_order() -> None:
    items = [(0, "a"), (1, "b"), (2, "a"), (3, "b"), (4, "c")]
    assert fold(items) == [([0, 2], "a"), ([1, 3], "b"), ([4], "c")]


def test_rank_label() -> None:
    assert rank_label([1]) == "rank 1"
    assert rank_label([0, 1, 3]) == "ranks 0,1,3"


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


def test_table_escapes_html() -> None:
    assert "&lt;b&gt;" in Table(("a",), [("<b>",)])._repr_html_()
