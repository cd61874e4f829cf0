"""A run store, profile folder or cluster file that is not this user's own is shown
read-only: the server neither signals what it names nor loads its launcher classes.

The attack: a store written by another user (copied, or a team's shared one) records a
cluster whose kernel is gone, with a rank pid that is one of the victim's own unrelated
processes and a loadable ipyparallel cluster file. The panel's Stop then sent SIGTERM to
that process. Now GET says ``read_only`` with the reason, and Stop and Interrupt are 409
with it; the process lives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dist_notebook.store import StoreWriter

from .conftest import dead_pid

API = ("dist-notebook", "api")
OTHER_UID = 65534  # nobody: a uid that is not ours


def forged_cluster(writer: StoreWriter, profile: Path, victim: int) -> None:
    """A cluster row whose kernel is gone, with *victim* as its rank and a real cluster
    file (nothing running) in *profile*."""
    import ipyparallel as ipp

    cluster = ipp.Cluster(profile_dir=str(profile), cluster_id="forged", n=1)
    Path(cluster.cluster_file).parent.mkdir(parents=True, exist_ok=True)
    Path(cluster.cluster_file).write_text(json.dumps(cluster.to_dict()))
    writer.add_cluster(
        "c-forged",
        n=1,
        backend="gloo",
        kernel_pid=dead_pid(),
        profile_dir=str(profile),
        ipp_cluster_id="forged",
    )
    writer.set_cluster_state("c-forged", "ready")
    writer.set_ranks(
        "c-forged",
        [{"rank": 0, "host": "localhost", "pid": victim, "device": "cpu", "state": "idle"}],
    )


async def refused(jp_fetch, action: str) -> str:
    from tornado.httpclient import HTTPClientError

    with pytest.raises(HTTPClientError) as e:
        await jp_fetch(*API, "clusters", "c-forged", action, method="POST", body=b"")
    assert e.value.code == 409, e.value
    return json.loads(e.value.response.body)["message"]


@pytest.fixture
def victim():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    time.sleep(0.05)  # created before the cluster file: as an old rank pid would be
    yield proc.pid
    proc.kill()
    proc.wait()


def check_untouched(pid: int) -> None:
    time.sleep(2.5)  # the server's reap waits 2 s for what it signalled
    assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the store to another uid")
async def test_a_store_of_another_user_is_read_only(jp_fetch, writer, store_file, victim):
    from dist_notebook.cluster.profiles import own_profile_dir

    forged_cluster(writer, Path(own_profile_dir("forged")), victim)
    writer.close()
    os.chown(store_file, OTHER_UID, OTHER_UID)
    shown = json.loads((await jp_fetch(*API, "clusters", "c-forged")).body)
    assert "not a private file of yours" in (shown.get("read_only") or ""), shown
    for action in ("stop", "interrupt"):
        text = await refused(jp_fetch, action)
        assert "read-only" in text and "kernel that started it" in text, text
    check_untouched(victim)


async def test_a_profile_folder_outside_the_private_base_is_read_only(
    jp_fetch, writer, tmp_path, victim
):
    forged_cluster(writer, tmp_path / "elsewhere" / "cluster-forged", victim)
    listed = json.loads((await jp_fetch(*API, "clusters")).body)
    assert "not in your private folder" in (listed[0].get("read_only") or ""), listed
    text = await refused(jp_fetch, "stop")
    assert "read-only" in text and "not in your private folder" in text, text
    check_untouched(victim)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another uid")
async def test_a_cluster_file_of_another_user_is_read_only(jp_fetch, writer, victim):
    from dist_notebook.cluster.profiles import own_profile_dir

    profile = Path(own_profile_dir("forged"))
    forged_cluster(writer, profile, victim)
    for f in (profile / "security").glob("cluster-*.json"):
        os.chown(f, OTHER_UID, OTHER_UID)
    text = await refused(jp_fetch, "stop")
    assert "read-only" in text and "is not a file of yours" in text, text
    check_untouched(victim)


async def test_this_users_own_cluster_is_not_read_only(jp_fetch, writer, victim):
    from dist_notebook.cluster.profiles import own_profile_dir

    forged_cluster(writer, Path(own_profile_dir("forged")), victim)
    shown = json.loads((await jp_fetch(*API, "clusters", "c-forged")).body)
    assert shown["read_only"] is None, shown
