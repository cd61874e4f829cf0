"""What the ranks of a detached cluster ran, kept with the cluster for every kernel.

A kernel's own history (magics/history.py) ends with the kernel; the cluster goes on,
and so does what its ranks hold. So each ``%%dist`` cell, ``%dist_push`` and
``%%dist_train`` a kernel runs on a detached cluster is also sent to its keeper
(``keep``), which holds the cluster's list in order, every kernel's; a kernel that
attaches later asks for it (``history``) and ``%dist_export`` writes from it.

A pushed value is no JSON: the kernel that pushes it pickles it into the cluster's own
profile folder (owner-only, under the private base, removed with the cluster at its
stop), one file per push, made 0600 from its first byte; the keeper keeps its name.
Unpickling runs code, so a kept value is loaded only from a regular file of this user
that nobody else can read or write, in a folder only this user can write in.

    entry = keep_values(profile_dir, {"kind": "push", "code": "lr", ...}, {"lr": 0.1})
    link.request("keep", kernel=os.getpid(), entry=entry)
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import time
from pathlib import Path
from typing import Any

from ..privatedir import UnsafeDirectoryError, check_private, private_dir

FOLDER = "history"  # in the cluster's profile folder
KINDS = ("dist", "push", "train")
# What the keeper holds at most, the oldest going first: its whole list is one reply of
# the link, which ends a connection past MAX_MESSAGE_BYTES (16 MB).
MAX_ENTRIES = 10_000
MAX_BYTES = 8 << 20


class KeptValueError(RuntimeError):
    """A kept value cannot be loaded; the message says why (the fix is the caller's)."""


def keep_values(profile_dir: str, entry: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """*entry* with ``values``: {name: {"file": F}} for each value pickled into the
    cluster's folder, or {name: {"unkept": why}} for one that cannot be pickled."""
    import cloudpickle

    kept: dict[str, dict[str, str]] = {}
    for name, value in values.items():
        try:
            data = cloudpickle.dumps(value)
        except Exception as e:  # any pickling failure: the export says it, if it needs it
            kept[name] = {"unkept": f"{type(e).__name__}: {e}"}
            continue
        kept[name] = {"file": _write_private(Path(profile_dir), data)}
    return {**entry, "values": kept}


def _write_private(profile_dir: Path, data: bytes) -> str:
    folder = private_dir(profile_dir / FOLDER)
    name = f"push-{secrets.token_hex(8)}.pkl"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(folder / name, flags, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return name


def load_value(profile_dir: str, kept: dict[str, str]) -> Any:
    """The value of a kept push (``{"file": F}``); KeptValueError if it cannot be."""
    if "file" not in kept:
        raise KeptValueError(f"it could not be pickled ({kept.get('unkept', 'unknown')})")
    file = kept["file"]
    if not isinstance(file, str) or os.sep in file or not file.startswith("push-"):
        raise KeptValueError(f"its file name {file!r} is not one of ours")
    folder = Path(profile_dir) / FOLDER
    path = folder / file
    try:
        check_private(folder)
        info = os.lstat(path)
    except FileNotFoundError:
        raise KeptValueError(f"{path} is gone") from None
    except UnsafeDirectoryError as e:
        raise KeptValueError(str(e)) from None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise KeptValueError(
            f"{path} is not a private file of yours (mode {stat.S_IMODE(info.st_mode):o},"
            f" uid {info.st_uid})"
        )
    import pickle

    with open(path, "rb") as f:
        return pickle.load(f)  # our own file, owner-only, in our own private folder


class KeptHistory:
    """The keeper's list: every kernel's entries on its cluster, in the order they came."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._sizes: list[int] = []
        self._seq = 0

    def add(self, kernel: int, entry: Any) -> int:
        """Keep *entry* (checked: a dict of the kinds the kernels send); its number."""
        if not isinstance(entry, dict) or entry.get("kind") not in KINDS:
            raise ValueError(f"a history entry must be a dict of kind {KINDS}")
        if not isinstance(entry.get("code"), str) or not isinstance(entry.get("key"), str):
            raise ValueError("a history entry needs its code and key as text")
        self._seq += 1
        kept = {**entry, "seq": self._seq, "kernel": kernel, "at": time.time()}
        self.entries.append(kept)
        self._sizes.append(len(json.dumps(kept)))
        while len(self.entries) > MAX_ENTRIES or sum(self._sizes) > MAX_BYTES:
            del self.entries[0], self._sizes[0]
        return self._seq
