"""The values pushed to a detached cluster, kept with it for later kernels' exports
(issue #42), are its owner's alone: a real second Unix user, with the run store in a
folder every user may enter, can neither read a kept value nor put a file of its own
beside them (a pickle there would run as the owner's code when an export loads it)."""

from __future__ import annotations

import os
import shutil
import stat
import textwrap
from pathlib import Path

import pytest

from .conftest import Kernel, kill_all
from .test_detach import info_of, tree_of
from .test_detach_other_user import as_user
from .test_detach_other_user import other as other  # the fixture: the second user, checked

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("useradd") is None,
        reason="needs root and useradd to create a second Unix user (CI runs as root)",
    ),
]

PROBE = textwrap.dedent(
    """
    import os, sys

    for path in sys.argv[1:]:
        try:
            if path.endswith(".pkl"):
                open(path, "rb").read()
            else:
                fd = os.open(os.path.join(path, "push-planted.pkl"), os.O_WRONLY | os.O_CREAT)
                os.close(fd)
            print("DONE", path)
        except PermissionError:
            print("DENIED", path)
    """
)


def test_another_user_cannot_read_or_plant_kept_values(
    other: tuple[int, int], shared_dir: Path
) -> None:
    kernel = Kernel(str(shared_dir / "runs.sqlite"))
    tree: list[int] = []
    try:
        out, errors = kernel.run("%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu --detach")
        assert not errors, errors
        info = info_of(kernel)
        tree = tree_of(info["keeper"])
        out, errors = kernel.run("secret = {'token': 'only mine'}\n%dist_push secret")
        assert not errors, errors
        folder = Path(info["profile"]) / "history"
        files = sorted(folder.glob("push-*.pkl"))
        assert len(files) == 1, files
        assert stat.S_IMODE(os.lstat(files[0]).st_mode) == 0o600
        assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
        probe = as_user(other, PROBE, str(files[0]), str(folder))
        assert probe.stdout.split() == ["DENIED", str(files[0]), "DENIED", str(folder)], (
            probe.stdout + probe.stderr
        )
        assert sorted(folder.iterdir()) == files  # nothing planted beside it
        out, errors = kernel.run("%dist_cluster stop")
        assert not errors, errors
    finally:
        kernel.close()
        kill_all(tree)
