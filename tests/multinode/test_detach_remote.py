"""Detached clusters on the test hosts (issue #27): ``--detach`` with ssh and with Slurm.

The keeper holds the remote engines as a kernel would (ipyparallel's launchers, from
the keeper's process): the kernel lets go (``detach``), the ranks on both hosts go on
with their variables, a kernel attaches again, a collective across the hosts works, and
stop leaves nothing on either host (with Slurm: the job leaves the queue).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import session_of
from IPython.utils.capture import capture_output
from ranklines import printed_by

from testbed.slurm import jobs

from .conftest import engines_on, left_on, nothing_left, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CASES = {
    "ssh": "--launcher ssh --hosts h1:1,h2:1",
    "slurm": "--launcher slurm --nodes 2 --time 10 --partition test",
}


@pytest.mark.parametrize("launcher", sorted(CASES))
def test_detached_remote_cluster_goes_on_without_its_kernel(
    shell: Any, launcher: str, request: pytest.FixtureRequest
) -> None:
    hosts = request.getfixturevalue("ssh_hosts" if launcher == "ssh" else "slurm_hosts")
    session = session_of(shell)
    saved, session.cluster = session.cluster, None
    try:
        with capture_output() as cap:
            shell.run_line_magic(
                "dist_cluster", f"start {CASES[launcher]} --interface {hosts.bridge} --detach"
            )
        cluster = session.cluster
        assert cluster is not None and "is detached" in cap.stdout, cap.stdout
        assert [r.host for r in cluster.ranks] == ["h1", "h2"]
        shell.run_cell("%%dist\nimport socket\nwhere = socket.gethostname()")
        shell.run_line_magic("dist_cluster", "detach")
        assert session.cluster is None
        assert all(engines_on(h) for h in hosts.hosts), left_on(hosts)
        shell.run_line_magic("dist_cluster", f"attach {cluster.id}")
        again = session.cluster
        assert again is not None and again.id == cluster.id
        with capture_output() as cap:
            result = shell.run_cell(
                "%%dist\nt = torch.ones(1) * (rank + 1)\ndist.all_reduce(t)\nprint(where, int(t))"
            )
        assert result.error_in_exec is None, result.error_in_exec
        assert printed_by(cap.stdout, "h1 3") == {0} and printed_by(cap.stdout, "h2 3") == {1}, (
            cap.stdout
        )
        if launcher == "slurm":
            assert len(jobs(hosts.slurm_conf)) == 1
        shell.run_line_magic("dist_cluster", "stop")
        wait_for(f"nothing left on the hosts {left_on(hosts)}", nothing_left(hosts), 30)
        if launcher == "slurm":
            deadline = time.monotonic() + 20
            while jobs(hosts.slurm_conf) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert jobs(hosts.slurm_conf) == []
    finally:
        current = session.cluster
        if current is not None and current.state.value != "stopped":
            current.stop_sync()
        session.cluster = saved
