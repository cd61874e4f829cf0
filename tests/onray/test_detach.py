"""``--detach`` with ``--launcher ray`` on a real Ray head (loopback, 4 CPUs).

The keeper is the Ray driver that holds the placement group and the actors (as it holds a
local or remote cluster's engines): the kernel lets go (``detach``), the actors and their
engines go on with the ranks' variables, a kernel attaches again, a collective works, and
stop leaves no actor or placement group of ours in Ray.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import session_of
from IPython.utils.capture import capture_output
from ranklines import printed_by

from .raystate import ours

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_detached_ray_cluster_goes_on_without_its_kernel(shell: Any, ray_head: str) -> None:
    session = session_of(shell)
    saved, session.cluster = session.cluster, None
    assert not any(ours(None, ray_head))
    try:
        with capture_output() as cap:
            shell.run_line_magic(
                "dist_cluster", f"start -n 2 --cpu --launcher ray --address {ray_head} --detach"
            )
        cluster = session.cluster
        assert cluster is not None and "is detached" in cap.stdout, cap.stdout
        shell.run_cell("%%dist\nkept = (rank + 1) * 10")
        shell.run_line_magic("dist_cluster", "detach")
        assert session.cluster is None
        actors, groups = ours(None, ray_head)
        assert len(actors) == 2 and len(groups) == 1, (actors, groups)
        shell.run_line_magic("dist_cluster", f"attach {cluster.id}")
        again = session.cluster
        assert again is not None and again.id == cluster.id
        with capture_output() as cap:
            result = shell.run_cell(
                "%%dist\nt = torch.ones(1) * kept\ndist.all_reduce(t)\nprint('sum', int(t))"
            )
        assert result.error_in_exec is None, result.error_in_exec
        assert printed_by(cap.stdout, "sum 30") == {0, 1}, cap.stdout
        shell.run_line_magic("dist_cluster", "stop")
        deadline = time.monotonic() + 20
        while any(ours(None, ray_head)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(ours(None, ray_head)), ours(None, ray_head)
    finally:
        current = session.cluster
        if current is not None and current.state.value != "stopped":
            current.stop_sync()
        session.cluster = saved
