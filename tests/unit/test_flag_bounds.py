"""Every number a magic takes is bounded: nan, inf, a negative, 0 where it must be more, a
number past what the layers under the flag hold (a 20-digit --steps overflowed the run
store; --threads 1000000 made torch start a million threads; --idle-timeout nan was
written into keeper.json as invalid JSON) each get one line naming the flag and the range.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from IPython.core.error import UsageError

from dist_notebook.magics import args as magic_args
from dist_notebook.magics.args import parse_words, parser_of
from dist_notebook.magics.auto import AutoMagics
from dist_notebook.magics.cluster_magics import ClusterMagics
from dist_notebook.magics.debug_magics import DebugMagics
from dist_notebook.magics.exec_magics import ExecMagics
from dist_notebook.magics.export_magics import ExportMagics
from dist_notebook.magics.reload_magics import ReloadMagics
from dist_notebook.magics.runs_magics import RunsMagics
from dist_notebook.magics.train_magics import TrainMagics
from dist_notebook.training.run import RunSpec

MAGICS = [
    ClusterMagics.dist_cluster,
    ExecMagics.dist,
    ExecMagics.dist_pull,
    TrainMagics.dist_train,
    DebugMagics.dist_debug,
    ExportMagics.dist_export,
    RunsMagics.dist_runs,
    ReloadMagics.dist_autoreload,
    ReloadMagics.dist_sync,
    AutoMagics.dist_auto,
]

BAD_NUMBERS = [
    "nan",
    "inf",
    "-inf",
    "-1",
    "0.5e400",
    "99999999999999999999",
    "1" * 5000,  # past Python's 4,300-digit int() limit
    "1e30",
    "ten",
]


def numeric_flags() -> list[tuple[str, str, Any]]:
    """(magic, flag or positional, the type) for every flag whose value is a number."""
    found = []
    for magic in MAGICS:
        parser = parser_of(magic)
        for action in parser._actions:  # argparse has no public list
            if action.type is None or action.type is str:
                continue
            name = action.option_strings[-1] if action.option_strings else action.dest
            found.append((parser.prog, name, action.type))
    return found


def test_every_numeric_flag_has_a_bounded_type() -> None:
    """No flag reads a number with plain int or float (unbounded: nan, 10**20, -5)."""
    flags = numeric_flags()
    names = {(prog, name) for prog, name, _ in flags}
    for expected in [
        ("%%dist_train", "--steps"),
        ("%%dist_train", "--timeout"),
        ("%%dist_train", "--checkpoint-every"),
        ("%dist_cluster", "-n"),
        ("%dist_cluster", "--threads"),
        ("%dist_cluster", "--timeout"),
        ("%dist_cluster", "--idle-timeout"),
        ("%%dist", "--timeout"),
        ("%dist_pull", "--rank"),
        ("%dist_debug", "rank"),
        ("%dist_export", "--nodes"),
    ]:
        assert expected in names, expected
    for prog, name, kind in flags:
        assert kind not in (int, float), f"{prog} {name} reads an unbounded {kind.__name__}"


def words_for(prog: str, name: str, value: str) -> list[str]:
    if name.startswith("-"):
        return [f"{name}={value}"]  # '=': a value starting with '-' is not taken for a flag
    return ["--", value]


@pytest.mark.parametrize(("prog", "name", "kind"), numeric_flags())
@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_a_bad_number_is_one_line_naming_the_flag_and_the_range(
    prog: str, name: str, kind: Any, value: str
) -> None:
    if kind is magic_args.int_list and value.startswith("-1"):
        value = "0,-1"
    if kind is magic_args.rank_number and value == "-1":
        pytest.skip("a negative rank is the cluster's to refuse (check_ranks names its ranks)")
    parser = parser_of(next(m for m in MAGICS if parser_of(m).prog == prog))
    with pytest.raises(UsageError) as caught:
        parse_words(parser, words_for(prog, name, value))
    message = str(caught.value)
    first = message.splitlines()[0]  # the usage line follows
    assert f"argument {name}" in first or name in first, first
    assert "give" in first or "write it like" in first or "negative" in first, first
    assert len(first) < 300, "a 5,000-digit value is cut in the message"


@pytest.mark.parametrize(
    ("kind", "good", "bad_high"),
    [
        (magic_args.steps_count, "1000", str(magic_args.MAX_STEPS + 1)),
        (magic_args.positive_int, "8", str(magic_args.MAX_RANKS + 1)),
        (magic_args.thread_count, "4", "1000000"),
        (magic_args.rank_number, "0", str(magic_args.MAX_RANKS + 1)),
        (magic_args.positive_float, "0.25", str(magic_args.MAX_SECONDS * 2)),
        (magic_args.duration, "30m", "400d"),
    ],
)
def test_each_kind_takes_its_range_and_names_it(kind: Any, good: str, bad_high: str) -> None:
    kind(good)
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        kind(bad_high)
    message = str(caught.value)
    assert "give" in message, message


def test_threads_of_a_million_is_refused_naming_the_range() -> None:
    with pytest.raises(
        UsageError, match=r"argument --threads: 1000000 is out of range: give 1 to 1024\n"
    ):
        parse_words(parser_of(ClusterMagics.dist_cluster), ["start", "--threads", "1000000"])


def test_idle_timeout_nan_and_inf_are_refused() -> None:
    for value in ("nan", "inf", "nanm", "-1h", "0s"):
        with pytest.raises(
            UsageError, match=r"argument --idle-timeout: .*at most 31536000 \(365 days\)"
        ):
            parse_words(
                parser_of(ClusterMagics.dist_cluster),
                ["start", "--detach", f"--idle-timeout={value}"],
            )


def test_steps_of_twenty_digits_is_a_usage_error_not_an_overflow() -> None:
    with pytest.raises(
        UsageError, match=r"--steps: 99999999999999999999 is out of range: give 1 to 10{12}"
    ):
        parse_words(parser_of(TrainMagics.dist_train), ["--steps", "99999999999999999999"])


def test_scale_count_is_bounded_too() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="give 1 to 100000"):
        magic_args.positive_int("99999999999999999999")


def test_the_api_refuses_steps_beyond_64_bits() -> None:
    """RunSpec, made by code rather than the magic, says so before the store overflows."""
    for field in ("steps", "checkpoint_every"):
        with pytest.raises(ValueError, match=r"must be 1 to 9223372036854775807"):
            RunSpec(code="pass", **{field: 2**70})
    RunSpec(code="pass", steps=2**63 - 1)
