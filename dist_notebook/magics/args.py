"""Argument parsing for the magics: every mistake becomes a UsageError naming the fix."""

from __future__ import annotations

import argparse
import shlex
from typing import Any, NoReturn

from IPython.core.error import UsageError


class MagicParser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting the kernel."""

    def __init__(self, prog: str, **kwargs: Any) -> None:
        super().__init__(prog=prog, add_help=False, allow_abbrev=False, **kwargs)
        self.add_argument("-h", "--help", action="store_true", help="show this help")

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage().strip()}")

    def parse_line(self, line: str, *, keep_quotes: bool = False) -> argparse.Namespace:
        """Parse *line* like a shell would; with *keep_quotes*, quoted words keep their
        quotes (for a Python expression such as ``d['key']``)."""
        try:
            words = _split(line, keep_quotes)
        except ValueError as e:
            raise UsageError(
                f"{self.prog}: cannot read the arguments ({e}); check the quotes"
            ) from None
        args = self.parse_args(words)
        if args.help:
            raise UsageError(self.format_help())
        return args


def _split(line: str, keep_quotes: bool) -> list[str]:
    if not keep_quotes:
        return shlex.split(line)
    lexer = shlex.shlex(line, posix=False)
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def int_list(text: str) -> list[int]:
    """'0,2' -> [0, 2]; used for --ranks and --gpus."""
    try:
        values = [int(part) for part in text.split(",") if part.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of numbers; write it like 0,1,2"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("the list is empty; write it like 0,1")
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r} has a negative number")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} lists a number twice")
    return values


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be 1 or more")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def check_ranks(ranks: list[int] | None, n: int, flag: str = "--ranks") -> list[int] | None:
    """*ranks* if each is a rank of an *n*-rank cluster; else a UsageError naming *flag*."""
    if ranks is None:
        return None
    bad = [r for r in ranks if not 0 <= r < n]
    if bad:
        raise UsageError(f"unknown rank {bad[0]}: this cluster has ranks 0..{n - 1}; fix {flag}")
    return ranks
