"""Arguments of the magics, declared with IPython's ``magic_arguments``.

Each magic declares its flags with decorators; IPython builds the argparse parser and
puts its help (every flag, then examples) in the magic's docstring, so ``%dist_cluster?``
shows it. ``parse`` reads a line like a shell would: ``--help`` prints the help, a
``# comment`` ends the line as in Python, and every mistake becomes a UsageError that
names the flag, says which flag or subcommand was probably meant, and shows the usage line.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
from collections.abc import Callable, Iterable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import (
    ArgDecorator,
    MagicArgumentParser,
    MagicHelpFormatter,
    argument,
    kwds,
)

# The parser type that flag groups (remote_args.add_remote_flags) add their flags to.
MagicParser = MagicArgumentParser

HELP = argument("-h", "--help", action="store_true", help="show this help and return")


class _Formatter(MagicHelpFormatter):
    """IPython's magic help, with a plain ``usage:`` line (IPython's is a reST block), and
    every flag's default."""

    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: Any = "usage: ") -> None:
        argparse.RawDescriptionHelpFormatter.add_usage(self, usage, actions, groups, prefix)

    def _get_help_string(self, action: argparse.Action) -> str:
        """The flag's help, with its default when the help does not say it already."""
        text = action.help or ""
        if "default" not in text and action.default not in (None, False, argparse.SUPPRESS):
            text += " (default: %(default)s)"
        return text


class help_text(kwds):  # noqa: N801 (a decorator, named like IPython's)
    """Examples shown after the flags, in ``%magic?`` and ``%magic --help``; every magic
    has them. Flags are never abbreviated: ``--rank`` is not taken for ``--ranks``."""

    def __init__(self, examples: str) -> None:
        super().__init__(epilog="examples:\n" + examples.strip("\n"), formatter_class=_Formatter)

    def add_to_parser(self, parser: Any, group: Any) -> None:
        parser.allow_abbrev = False


class exclusive(ArgDecorator):  # noqa: N801 (a decorator, named like IPython's)
    """Flags of which at most one may be given, e.g. ``--gpus`` or ``--cpu``."""

    def __init__(self, *flags: argument) -> None:
        self.flags = flags

    def add_to_parser(self, parser: Any, group: Any) -> None:
        exclusive_group = parser.add_mutually_exclusive_group()
        for flag in self.flags:
            exclusive_group.add_argument(*flag.args, **flag.kwds)


class flags_from(ArgDecorator):  # noqa: N801 (a decorator, named like IPython's)
    """Flags that a function adds to the parser (a group kept in its own module)."""

    def __init__(self, add: Callable[[Any], None]) -> None:
        self.add = add

    def add_to_parser(self, parser: Any, group: Any) -> None:
        self.add(parser)


def parser_of(magic: Any) -> MagicArgumentParser:
    return magic.parser  # type: ignore[no-any-return]


def parse(magic: Any, line: str, *, keep_quotes: bool = False) -> argparse.Namespace | None:
    """The flags of *magic* in *line*; None when ``--help`` was given (the help is printed).

    With *keep_quotes*, quoted words keep their quotes (for a Python expression such as
    ``d['key']``).
    """
    parser = parser_of(magic)
    try:
        words = split_words(strip_comment(line), keep_quotes)
    except ValueError as e:
        raise UsageError(
            f"{parser.prog}: cannot read the arguments ({e}); check the quotes"
        ) from None
    args = parse_words(parser, words)
    if args.help:
        print(parser.format_help())
        return None
    return args


def parse_words(parser: MagicArgumentParser, words: list[str]) -> argparse.Namespace:
    try:
        return parser.parse_args(words)
    except UsageError as e:
        hint = did_you_mean(parser, words, str(e))
        raise UsageError(f"{parser.prog}: {e}{hint}\n{parser.format_usage().strip()}") from None


def strip_comment(line: str) -> str:
    """*line* without its ``# comment``: a ``#`` outside quotes that starts a word (the
    line's start or after a space) ends the arguments, as in Python and in a shell.

    IPython hands a magic the rest of its line as typed, comment included. Inside quotes
    (``--name '#1'``) or inside a word (``--name run#1``) a ``#`` is kept.
    """
    quote = ""
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


_NUMBER = re.compile(r"-\d+(\.\d*)?$")
_INVALID_CHOICE = re.compile(r"argument ([^:]+): invalid choice: ['\"]?([^'\"]*)['\"]? \(")


def did_you_mean(parser: MagicArgumentParser, words: list[str], message: str) -> str:
    """``; did you mean --steps?`` for a misspelt flag or subcommand, else ``""``.

    A misspelt flag comes first: its value, taken for a subcommand, is what argparse
    complains about (``--stpes 10`` gives "invalid choice: '10'").
    """
    actions = parser._actions  # argparse has no public list of a parser's arguments
    flags = [flag for action in actions for flag in action.option_strings]
    for word in words:
        name = word.split("=", 1)[0]
        if word.startswith("-") and not _NUMBER.match(word) and name not in flags:
            hint = _suggestion(name, [f for f in flags if f.startswith("--")])
            if hint:
                return hint
    choice = _INVALID_CHOICE.search(message)
    if choice is None:
        return ""
    named = choice.group(1)  # as argparse names it: metavar, flags or dest
    offered = [
        str(c)
        for action in actions
        if named in (action.metavar, "/".join(action.option_strings), action.dest)
        for c in action.choices or ()
    ]
    return _suggestion(choice.group(2), offered)


def _suggestion(word: str, offered: list[str]) -> str:
    """The offered word closest to *word*, judged on what follows the dashes (the two
    dashes every flag shares made ``--nmber`` look like ``--time``), else ``""``."""
    bare = {o.lstrip("-"): o for o in offered}
    close = difflib.get_close_matches(word.lstrip("-"), list(bare), n=1, cutoff=0.7)
    return f"; did you mean {bare[close[0]]}?" if close else ""


def split_words(line: str, keep_quotes: bool = False) -> list[str]:
    if not keep_quotes:
        return shlex.split(line)
    lexer = shlex.shlex(line, posix=False)
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def option_names(parser: MagicArgumentParser) -> list[str]:
    """Every flag of *parser*, read from its help (``--gpus``, ``-n`` ...)."""
    found = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", parser.format_help())
    return sorted(dict.fromkeys(found))


def completer(words: Iterable[str]) -> Callable[[Any, Any], list[str]]:
    """An IPython ``complete_command`` hook offering *words* (subcommands and flags)."""
    offered = list(words)

    def complete(_shell: Any, event: Any) -> list[str]:
        return [w for w in offered if w.startswith(event.symbol)]

    return complete


# The ranges of the magics' numbers. Each is far beyond any real use and within what the
# layers under the flags take: a step or a count is a 64-bit integer in the run store,
# torch takes a thread count as a C int (and starts that many threads), and a time in
# seconds becomes a timedelta, a ZMQ poll in milliseconds, a timer.
MAX_STEPS = 10**12  # --steps, --checkpoint-every
MAX_RANKS = 100_000  # -n, scale N, --ranks, --rank, GPU ids, --nodes, per-node counts
MAX_THREADS = 1024  # --threads
MAX_SECONDS = 30 * 86400.0  # --timeout (30 days)
MAX_IDLE_SECONDS = 365 * 86400.0  # --idle-timeout (a year)


def _shown(text: str) -> str:
    """*text* for a message: quoted, and cut at 40 characters (a 5,000-digit number)."""
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from *low* to *high*, else a one-line error
    naming the range (argparse puts the flag before it)."""

    def whole_number(text: str) -> int:
        digits = text.strip().lstrip("+-")
        try:
            value = int(text)
        except ValueError:
            if digits.isdigit():  # more than 4,300 digits: int() refuses to read it
                raise argparse.ArgumentTypeError(
                    f"{_shown(text)} is out of range: give {low} to {high}"
                ) from None
            raise argparse.ArgumentTypeError(
                f"{_shown(text)} is not a whole number: give {low} to {high}"
            ) from None
        if not low <= value <= high:
            shown = str(value) if len(text) <= 40 else _shown(text)
            why = f"must be {low} or more" if value < low else "is out of range"
            raise argparse.ArgumentTypeError(f"{shown} {why}: give {low} to {high}")
        return value

    whole_number.__name__ = f"whole number {low} to {high}"  # argparse's name for it
    return whole_number


def int_list(text: str, high: int = MAX_RANKS - 1) -> list[int]:
    """'0,2' -> [0, 2]; used for --ranks and --gpus (each 0 to *high*)."""
    try:
        values = [int(part) for part in text.split(",") if part.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is not a list of numbers; write it like 0,1,2"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("the list is empty; write it like 0,1")
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{_shown(text)} has a negative number")
    if any(v > high for v in values):
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} has a number over {high}: give 0 to {high}"
        )
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{_shown(text)} lists a number twice")
    return values


# A count of ranks, nodes or GPUs; scale's N is read with it too.
positive_int = bounded_int(1, MAX_RANKS)
steps_count = bounded_int(1, MAX_STEPS)
thread_count = bounded_int(1, MAX_THREADS)
_rank_bound = bounded_int(-MAX_RANKS, MAX_RANKS)


def rank_number(text: str) -> int:
    """A rank (``--rank``, ``%dist_debug N``): a whole number of at most 6 digits; which
    ranks there are is the cluster's to say (check_ranks: 'this cluster has ranks 0..1')."""
    try:
        return _rank_bound(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is not a rank: give 0 to {MAX_RANKS - 1}"
        ) from None


DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _seconds_in_range(value: float, text: str, high: float) -> float:
    # nan fails every comparison: "not 0 < value" refuses it, as it refuses inf past high.
    if not 0 < value <= high:
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} must be a positive number of seconds: give more than 0 and at "
            f"most {high:.0f} ({high / 86400:.0f} days)"
        )
    return value


def duration(text: str) -> float:
    """Seconds from ``90s``, ``30m``, ``2h``, ``1d`` or a plain number of seconds, more
    than 0 and at most a year (``--idle-timeout``)."""
    unit = DURATION_UNITS.get(text[-1:].lower(), None) if text else None
    number = text[:-1] if unit is not None else text
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is not a duration: write it like 90s, 30m or 2h"
        ) from None
    return _seconds_in_range(value, text, MAX_IDLE_SECONDS)


def positive_float(text: str) -> float:
    """A number of seconds, more than 0 and at most 30 days (``--timeout``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is not a number of seconds: give more than 0 and at most "
            f"{MAX_SECONDS:.0f}"
        ) from None
    return _seconds_in_range(value, text, MAX_SECONDS)


def check_ranks(ranks: list[int] | None, n: int, flag: str = "--ranks") -> list[int] | None:
    """*ranks* if each is a rank of an *n*-rank cluster; else a UsageError naming *flag*."""
    if ranks is None:
        return None
    bad = [r for r in ranks if not 0 <= r < n]
    if bad:
        raise UsageError(f"unknown rank {bad[0]}: this cluster has ranks 0..{n - 1}; fix {flag}")
    return ranks
