"""Directories only this user can write in: made owner-only, reused only once checked.

A predictable path in a shared place (``$TMPDIR/dist-notebook-<uid>``, a store folder
the user put in ``/tmp``) can be made in advance by another local user. Reused as it
was, a folder of theirs let them swap in their own cluster directory and connection
file: our engines registered with their controller and ran their code. So a folder we
did not just make is used only when it is a real directory (not a symlink), owned by
this user, that no group or other user can write in; anything else is refused with
the fix.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from . import envvars


class UnsafeDirectoryError(RuntimeError):
    """A directory we would use is not private to this user (its message names the fix)."""


def private_dir(path: Path) -> Path:
    """Make *path* (mode 0700, parents as needed) or check that the one there is ours
    and private; return it. Raises UnsafeDirectoryError, or OSError if it cannot be made."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass  # there already: checked below like any folder we did not make just now
    check_private(path)
    return path


def check_private(path: Path) -> None:
    """Refuse *path* unless it is a directory (not a symlink) of this user that nobody
    else can write in (what is inside is made owner-only)."""
    info = os.lstat(path)
    fix = (
        f"remove it (rm -rf {path}) and run again, or set {envvars.STORE} to a file "
        "in a folder of your own"
    )
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectoryError(f"{path} is not a directory but a link or a file: {fix}")
    if info.st_uid != os.getuid():
        raise UnsafeDirectoryError(
            f"{path} belongs to another user (uid {info.st_uid}), who could run code on your "
            f"ranks through it: {fix}"
        )
    if info.st_mode & 0o022:
        raise UnsafeDirectoryError(
            f"{path} can be written by other users (mode {stat.S_IMODE(info.st_mode):o}): "
            f"chmod 700 {path} if nobody else wrote into it, or {fix}"
        )
