"""``--launcher ssh`` on two real test hosts (network namespaces running sshd).

Three ranks, two on h1 and one on h2, so local ranks and node ranks both show. Besides
the scenarios every launcher runs (scenarios.py), a host's engines are killed during a
run with checkpoints that then resumes, and a host's link goes down.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError

from dist_notebook.cluster.onranks.stacks import StacksError, collect_stacks

from . import scenarios as s
from .conftest import engines_on, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
HOSTS = ["h1", "h1", "h2"]


@pytest.fixture(scope="module")
def cluster(shell: Any, ssh_hosts: Any) -> Iterator[Any]:
    with s.magic_cluster(shell, ssh_hosts, "--launcher ssh --hosts h1:2,h2:1") as cluster:
        yield cluster


def test_ranks_are_ordered_by_node_then_local_rank(cluster: Any) -> None:
    s.expect_placement(cluster, HOSTS)


def test_dist_prints_each_ranks_host(shell: Any, cluster: Any) -> None:
    s.expect_hosts_printed(shell, cluster, HOSTS)


def test_ddp_across_hosts_records_every_rank(shell: Any, cluster: Any) -> None:
    s.expect_ddp_recorded(shell, "ssh-ddp", HOSTS)


# Training with checkpoints in which the ranks of h2 are killed at step 13.
CKPT_CELL = """
import os, signal, socket, torch, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
ckpt = checkpointer(model, opt)
first_step = ckpt.restore()
for step in range(first_step, 20):
    if {kill} and socket.gethostname() == "h2" and step == 13:
        os.kill(os.getpid(), signal.SIGKILL)
    x = torch.randn(16, 4)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    report(step=step, loss=loss)
    ckpt.save(step)
"""


def test_resume_after_a_host_failure_goes_on_from_the_checkpoint(
    shell: Any, cluster: Any, tmp_path: Any
) -> None:
    flags = f"--name ssh-ckpt --no-dashboard --checkpoint-every 5 --checkpoint-dir {tmp_path}"
    failed = shell.run_cell(f"%%dist_train {flags}\n" + CKPT_CELL.format(kill=True))
    # h2's engine is killed mid-run (its ranks' host fails): the run fails naming it.
    error = str(failed.error_in_exec)
    assert "rank 2 (" in error and "host h2" in error and "died" in error, error
    assert cluster.state.value == "degraded"
    s.expect_restart(shell, cluster, HOSTS)
    resumed = shell.run_cell(f"%%dist_train {flags} --resume\n" + CKPT_CELL.format(kill=False))
    assert resumed.error_in_exec is None, resumed.error_in_exec
    assert shell.run_line_magic("dist_pull", "first_step --all") == {0: 10, 1: 10, 2: 10}


def test_host_link_down_fails_the_cell_then_restart(shell: Any, cluster: Any) -> None:
    hosts = cluster.test_hosts
    h2 = hosts.hosts[1]
    try:
        message = s.fails_naming(shell, "h2", [2], lambda: hosts.link(h2, up=False))
        assert "stopped answering" in message
        # Cut off from the controller, h2's engine ends by itself (missed heartbeats).
        wait_for("h2's engine exits without its controller", lambda: not engines_on(h2), 30)
    finally:
        hosts.link(h2, up=True)
    s.expect_restart(shell, cluster, HOSTS)


def test_stacks_say_they_need_local_engines(shell: Any, cluster: Any) -> None:
    # The kernel cannot signal another host's pids: no stack folder is made for them.
    assert cluster.stack_dir == ""
    with pytest.raises(UsageError, match="stacks needs local engines"):
        shell.run_line_magic("dist_cluster", "stacks")
    with pytest.raises(StacksError, match=r"needs local engines \(--launcher local\)"):
        collect_stacks(cluster)


def test_stop_leaves_nothing_on_any_host(cluster: Any) -> None:
    s.expect_stop_leaves_nothing(cluster)


def test_killed_kernel_leaves_nothing_within_the_bound(ssh_hosts: Any) -> None:
    spec = {"n": 2, "launcher": "ssh", "hosts": [["h1", 1], ["h2", 1]]}
    took = s.expect_killed_kernel_leaves_nothing(ssh_hosts, spec)
    print(f"ssh: hosts empty {took:.1f} s after the kernel was killed")
