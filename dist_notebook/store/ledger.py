"""What a kernel could not write to the run store before it exited, kept for the next
writer: a full disk through the kernel's exit lost the waiting records, and nothing said
so (the run read as orphaned, its lost records uncounted).

Each writer holds a small file beside the store, ``.NAME.unwritten-<random>``, made and
given its blocks (``posix_fallocate``) when the writer opens, while the disk still has
room, and locked (``flock``) for the writer's life. If writes are still waiting when the
writer ends, their count per run is written into those blocks (no new space needed on a
full disk). A later writer of the store takes every such file whose lock is free (its
writer is gone), writes each run's count into the run's events (``DROPPED_EVENT``, as
records given up in a long wait are), and removes it. A writer that wrote everything
removes its own file.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
from pathlib import Path

log = logging.getLogger("dist_notebook")

SIZE = 4096  # the file's blocks: a few hundred runs' counts
MAX_RUNS = 100  # runs named in one file (the most records first)


def _prefix(store: Path) -> str:
    return f".{store.name}.unwritten-"


class Ledger:
    """This writer's file (None where it could not be made: then nothing is kept)."""

    def __init__(self, store: Path) -> None:
        self.path: Path | None = None
        self._fd: int | None = None
        path = store.with_name(_prefix(store) + secrets.token_hex(8))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            log.debug("no ledger beside the run store at %s: %s", store, e)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.posix_fallocate(fd, 0, SIZE)
        except OSError as e:  # a full disk already, or no fallocate: nothing can be kept
            log.debug("no ledger beside the run store at %s: %s", store, e)
            os.close(fd)
            path.unlink(missing_ok=True)
            return
        self.path, self._fd = path, fd

    def keep(self, lost: dict[str | None, int], why: str) -> bool:
        """Write *lost* (records per run id) into the file's blocks; True if kept."""
        if self._fd is None:
            return False
        runs = sorted(((r, n) for r, n in lost.items() if r and n), key=lambda x: -x[1])
        data = json.dumps({"why": why[:200], "lost": dict(runs[:MAX_RUNS])}).encode()
        while len(data) > SIZE and runs:
            runs = runs[: len(runs) // 2]
            data = json.dumps({"why": why[:200], "lost": dict(runs)}).encode()
        try:
            os.pwrite(self._fd, data.ljust(SIZE), 0)
            os.fsync(self._fd)
        except OSError as e:
            log.warning("could not keep the count of the unwritten records: %s", e)
            return False
        self._close(remove=False)
        return True

    def discard(self) -> None:
        """Everything was written: no file left behind."""
        self._close(remove=True)

    def _close(self, remove: bool) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if remove and self.path is not None:
            self.path.unlink(missing_ok=True)
        os.close(fd)  # the lock goes with it: a later writer may take the file


def take_left(store: Path) -> list[tuple[dict[str, int], str]]:
    """The counts kept by writers of *store* that are gone (their files removed):
    [(records lost per run id, why)]. Files of live writers (locked) stay."""
    found: list[tuple[dict[str, int], str]] = []
    try:
        names = [p for p in store.parent.iterdir() if p.name.startswith(_prefix(store))]
    except OSError:
        return found
    for path in names:
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid != os.getuid():
                continue  # not ours: never read nor removed
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its writer is alive
            text = os.pread(fd, SIZE, 0).strip(b" \0")
            os.ftruncate(fd, 0)  # taken once: a sweeper that opened it too reads nothing
            path.unlink(missing_ok=True)
        finally:
            os.close(fd)
        if not text:
            continue  # its writer wrote everything, or ended before it could say
        try:
            kept = json.loads(text)
            lost = {str(r): int(n) for r, n in kept["lost"].items()}
            found.append((lost, str(kept.get("why", ""))))
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("a damaged count of unwritten records was dropped: %s", path)
    return found
