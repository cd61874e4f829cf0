"""Argument helpers of the magics: each mistake becomes a UsageError that names the fix."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st
from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments

from dist_notebook.magics.args import (
    HELP,
    check_ranks,
    help_text,
    int_list,
    option_names,
    parse,
    positive_float,
    positive_int,
    strip_comment,
)


@pytest.mark.parametrize(
    ("text", "expected"), [("0", [0]), ("0,2", [0, 2]), ("3,1,", [3, 1]), (" 1, 2", [1, 2])]
)
def test_int_list(text: str, expected: list[int]) -> None:
    assert int_list(text) == expected


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, unique=True))
def test_int_list_reads_back_what_it_is_given(values: list[int]) -> None:
    assert int_list(",".join(map(str, values))) == values


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ("a,b", "write it like 0,1,2"),
        ("", "the list is empty; write it like 0,1"),
        (",", "the list is empty"),
        ("0,-1", "negative number"),
        ("1,1", "lists a number twice"),
    ],
)
def test_int_list_errors(text: str, fix: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=fix):
        int_list(text)


def test_positive_int() -> None:
    assert positive_int("3") == 3
    with pytest.raises(argparse.ArgumentTypeError, match="0 must be 1 or more: give 1 to 100000"):
        positive_int("0")
    with pytest.raises(argparse.ArgumentTypeError, match="not a whole number"):
        positive_int("2.5")


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "soon"])
def test_positive_float_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="seconds"):
        positive_float(text)


def test_positive_float_accepts() -> None:
    assert positive_float("0.5") == 0.5


def test_check_ranks() -> None:
    assert check_ranks(None, 2) is None
    assert check_ranks([1, 0], 2) == [1, 0]
    with pytest.raises(
        UsageError, match=r"unknown rank 2: this cluster has ranks 0\.\.1; fix --ranks"
    ):
        check_ranks([0, 2], 2)
    with pytest.raises(UsageError, match=r"unknown rank -1: .*fix --rank\b"):
        check_ranks([-1], 2, flag="--rank")


@magic_arguments("%demo")
@HELP
@argument("--ranks", type=int_list, help="ranks")
@argument("-n", type=positive_int, help="count")
@help_text("  %demo -n 2    two of them")
def demo(line: str) -> None:
    """A demo magic."""


def test_parser_raises_usage_error_with_usage_line() -> None:
    with pytest.raises(UsageError, match=r"(?s)unrecognized arguments: --nope.*usage: %demo"):
        parse(demo, "--nope")


def test_parser_reports_bad_values_by_flag() -> None:
    with pytest.raises(UsageError, match=r"argument --ranks: 'x' is not a list of numbers"):
        parse(demo, "--ranks x")
    with pytest.raises(UsageError, match=r"argument -n: 0 must be 1 or more"):
        parse(demo, "-n 0")


def test_parser_bad_quotes() -> None:
    with pytest.raises(UsageError, match="check the quotes"):
        parse(demo, '--ranks "0')


def test_help_is_printed_not_raised(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse(demo, "--help") is None
    out = capsys.readouterr().out
    assert "usage: %demo" in out and "--ranks" in out and "%demo -n 2    two of them" in out


def test_docstring_is_the_help() -> None:
    assert demo.__doc__ is not None
    assert "A demo magic." in demo.__doc__ and "-n N" in demo.__doc__
    assert "examples:" in demo.__doc__


def test_parser_reads_quoted_words() -> None:
    args = parse(demo, "--ranks '0,1' -n 2")
    assert args is not None and args.ranks == [0, 1] and args.n == 2


def test_option_names_come_from_the_help() -> None:
    assert option_names(demo.parser) == ["--help", "--ranks", "-h", "-n"]


# --- a ``# comment`` after a magic is no argument -----------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("start   # one rank per visible GPU", "start"),
        ("# only a comment", ""),
        ("-n 2 # don't mind the quote in the comment", "-n 2"),
        ("--name '#1' # quoted", "--name '#1'"),
        ('--name "a # b"', '--name "a # b"'),
        ("--name run#1", "--name run#1"),
        (r"--name \# escaped # comment", r"--name \# escaped"),
        ("d['#']  # a key", "d['#']"),
        ("-n 2", "-n 2"),
    ],
)
def test_strip_comment(line: str, expected: str) -> None:
    assert strip_comment(line) == expected


@given(st.text(alphabet=st.sampled_from("ab -'\"#\\ "), max_size=30))
def test_strip_comment_keeps_lines_without_a_hash(text: str) -> None:
    line = text.replace("#", "")
    assert strip_comment(line) == line
    assert strip_comment(strip_comment(text)) == strip_comment(text)


def test_parse_drops_the_comment() -> None:
    args = parse(demo, "-n 2 --ranks 0,1   # two of them, on ranks 0 and 1")
    assert args is not None and args.n == 2 and args.ranks == [0, 1]
    args = parse(demo, "# nothing but a comment")
    assert args is not None and args.n is None


def test_a_quoted_hash_is_an_argument() -> None:
    args = parse(named, "--name '# not a comment' # a comment")
    assert args is not None and args.name == "# not a comment"
    args = parse(named, "--name run#1")
    assert args is not None and args.name == "run#1"


# --- "did you mean" ---------------------------------------------------------------------


@magic_arguments("%named")
@HELP
@argument("action", nargs="?", default="status", choices=("start", "status", "stop"))
@argument("--name", help="a name")
@argument("--steps", type=positive_int, help="steps")
@argument("--backend", choices=("auto", "nccl", "gloo"), help="backend")
@argument("--time", type=positive_int, help="seconds")
@help_text("  %named start --name a")
def named(line: str) -> None:
    """A magic with a subcommand."""


@pytest.mark.parametrize(
    ("line", "hint"),
    [
        ("--stpes 10", "did you mean --steps?"),
        ("--step=10", "did you mean --steps?"),
        ("start --nmae a", "did you mean --name?"),
        ("strat", "did you mean start?"),
        ("--backend ncll", "did you mean nccl?"),
    ],
)
def test_did_you_mean(line: str, hint: str) -> None:
    with pytest.raises(UsageError) as info:
        parse(named, line)
    first = str(info.value).splitlines()[0]
    assert first.startswith("%named: ") and first.endswith(hint)
    assert "usage: %named" in str(info.value)


def test_no_far_guess_from_the_dashes_alone() -> None:
    # "--nmber" shares only the dashes and two letters with "--time": no guess at all.
    with pytest.raises(UsageError) as info:
        parse(named, "start --nmber 4")
    assert "unrecognized arguments: --nmber 4" in str(info.value)
    assert "did you mean" not in str(info.value)


def test_no_guess_when_nothing_is_close() -> None:
    with pytest.raises(UsageError) as info:
        parse(named, "start --zzzzzz")
    assert "unrecognized arguments: --zzzzzz" in str(info.value)
    assert "did you mean" not in str(info.value)
