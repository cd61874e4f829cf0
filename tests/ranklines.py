"""Which ranks printed a line in ``%%dist`` output, folded (``[ranks 0-2,5] text``) or not
(``[rank 0] text``): for tests whose subject is not the folding itself, since a busy
machine may split a fold (a rank's line later than the others' shows on its own)."""

from __future__ import annotations

import re

_LABEL = re.compile(r"^\[ranks? ([0-9,\-]+)\] (.*)$")


def ranks_of(rank_set: str) -> set[int]:
    """``0-3,5`` -> {0, 1, 2, 3, 5}."""
    ranks: set[int] = set()
    for part in rank_set.split(","):
        first, _, last = part.partition("-")
        ranks.update(range(int(first), int(last or first) + 1))
    return ranks


def printed_by(out: str, text: str) -> set[int]:
    """The ranks whose output in *out* has the line *text*."""
    ranks: set[int] = set()
    for line in out.splitlines():
        match = _LABEL.match(line)
        if match and match.group(2) == text:
            ranks |= ranks_of(match.group(1))
    return ranks


def printed_starting(out: str, prefix: str) -> set[int]:
    """The ranks whose output in *out* has a line beginning with *prefix*."""
    ranks: set[int] = set()
    for line in out.splitlines():
        match = _LABEL.match(line)
        if match and match.group(2).startswith(prefix):
            ranks |= ranks_of(match.group(1))
    return ranks
