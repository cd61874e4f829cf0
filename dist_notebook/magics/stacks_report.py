"""``%dist_cluster stacks`` as a person reads it: each rank's main thread first, and
identical stacks once.

A rank's dump is faulthandler's text: blocks of ``Thread 0x... (most recent call
first):`` (or ``Current thread 0x...``) then ``  File ...`` lines. The main thread is
the one whose oldest frame is the program's top level (every other Python thread's is
``Thread._bootstrap``). A cell's frames read ``File "<cell>"`` (the rank's IPython
names its file after its pid). Within a rank, threads with the same frames print once with
their count; across ranks, the same report prints once with the rank set. Thread ids
are left out: they differ between processes and say nothing to the reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..cluster.onranks.tracebacks import rank_label

_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
# A cell's code as the rank's IPython names it (its pid in the path): the same cell on
# every rank, so it is written the same way.
_CELL_FILE = re.compile(r'"[^"]*ipykernel_\d+[/\\][^"]+\.py"')


@dataclass
class Thread:
    frames: list[str]

    @property
    def is_main(self) -> bool:
        # The program's top level is its oldest frame (a thread's is Thread._bootstrap;
        # a stack cut at faulthandler's 100 frames ends with "...": not known, not main).
        oldest = self.frames[-1] if self.frames else ""
        return oldest.endswith((" in <module>", " in _run_module_as_main"))


def parse(dump: str) -> list[Thread] | None:
    """The threads of a faulthandler dump; None when *dump* is not one (a rank that is
    gone or stopped is reported in words)."""
    threads: list[Thread] = []
    for line in dump.splitlines():
        if _HEADER.match(line.strip()):
            threads.append(Thread([]))
        elif threads and line.strip():
            threads[-1].frames.append(_CELL_FILE.sub('"<cell>"', line.rstrip()))
    return threads or None


def rank_report(dump: str) -> str:
    """One rank's stacks: the main thread first, identical other threads folded."""
    threads = parse(dump)
    if threads is None:
        return dump.strip()
    main = [t for t in threads if t.is_main]
    others: dict[tuple[str, ...], int] = {}
    for thread in threads:
        if not thread.is_main:
            key = tuple(thread.frames)
            others[key] = others.get(key, 0) + 1
    blocks = ["main thread (most recent call first):\n" + "\n".join(t.frames) for t in main]
    for frames, count in others.items():
        what = f"{count} threads, each" if count > 1 else "thread"
        blocks.append(f"{what} (most recent call first):\n" + "\n".join(frames))
    return "\n\n".join(blocks)


def report(stacks: dict[int, str]) -> str:
    """Every rank's stacks, ranks with the same report once (``--- ranks 0-63 ---``)."""
    by_text: dict[str, list[int]] = {}
    for rank, dump in sorted(stacks.items()):
        by_text.setdefault(rank_report(dump), []).append(rank)
    return "\n\n".join(f"--- {rank_label(ranks)} ---\n{text}" for text, ranks in by_text.items())
