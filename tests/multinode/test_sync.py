"""``%dist_sync`` onto two real test hosts over ssh (issue #26).

Each test host gets a disk of its own for the synced folder (a tmpfs mounted over it in
the host's mount namespace: the hosts otherwise share this machine's files, which would
make any copy look done). 100 small files and a module are synced; the ranks on both
hosts read them; an edited module, synced again with ``%dist_autoreload on``, runs its
new code on the remote ranks at the next cell. The sync's time is printed (repeated).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.utils.capture import capture_output
from ranklines import printed_by

from . import scenarios as s

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(shell: Any, ssh_hosts: Any) -> Iterator[Any]:
    with s.magic_cluster(shell, ssh_hosts, "--launcher ssh --hosts h1:1,h2:1") as cluster:
        yield cluster


@pytest.fixture
def folder(tmp_path: Path, ssh_hosts: Any) -> Iterator[Path]:
    """A folder here, and an empty private one at the same path on each test host."""
    path = tmp_path / "project"
    path.mkdir()
    for host in ssh_hosts.hosts:
        host.exec("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(path))
    try:
        yield path
    finally:
        for host in ssh_hosts.hosts:
            host.exec("umount", str(path), check=False)


def sync(shell: Any, path: Path) -> str:
    with capture_output() as cap:
        shell.run_line_magic("dist_sync", str(path))
    return cap.stdout


def on_ranks(shell: Any, cell: str) -> str:
    with capture_output() as cap:
        result = shell.run_cell(f"%%dist\n{cell}")
    assert result.error_in_exec is None, (result.error_in_exec, cap.stdout)
    return cap.stdout


def test_sync_copies_a_folder_to_every_host_and_autoreload_runs_the_edit(
    shell: Any, cluster: Any, folder: Path
) -> None:
    for i in range(100):
        (folder / f"data_{i:03d}.txt").write_text(f"row {i}\n")
    (folder / "synced_mod.py").write_text("def value():\n    return 1\n")
    listing = (
        f"import os\nprint(len([f for f in os.listdir({str(folder)!r}) if f.endswith('.txt')]))"
    )
    assert printed_by(on_ranks(shell, listing), "0") == {0, 1}  # nothing there before
    times = []
    out = sync(shell, folder)
    assert re.search(r"synced 101 files \(\d+ kB\) to h1, h2 in [\d.]+ s \(rsync\)", out), out
    times.append(float(re.search(r"in ([\d.]+) s", out).group(1)))  # type: ignore[union-attr]
    assert printed_by(on_ranks(shell, listing), "100") == {0, 1}
    shell.run_line_magic("dist_autoreload", "on")
    try:
        code = f"import sys\nsys.path.insert(0, {str(folder)!r})\nimport synced_mod\n"
        code += "print('v', synced_mod.value())"
        assert printed_by(on_ranks(shell, code), "v 1") == {0, 1}
        (folder / "synced_mod.py").write_text("def value():\n    return 2\n")
        for _ in range(3):  # the same folder again (rsync: only the change goes)
            out = sync(shell, folder)
            times.append(float(re.search(r"in ([\d.]+) s", out).group(1)))  # type: ignore[union-attr]
        assert printed_by(on_ranks(shell, "print('v', synced_mod.value())"), "v 2") == {0, 1}
    finally:
        shell.run_line_magic("dist_autoreload", "off")
    print(
        f"%dist_sync of 101 files to 2 hosts: first {times[0]:.2f} s, again (one changed) "
        f"median {statistics.median(times[1:]):.2f} s of {times[1:]} ({out.strip()})"
    )


def test_sync_of_a_missing_folder_names_it(shell: Any, cluster: Any, tmp_path: Path) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=r"%dist_sync: .*nowhere is not a folder"):
        shell.run_line_magic("dist_sync", str(tmp_path / "nowhere"))
