"""Nothing of ours listens beyond the cluster's address, even where this machine's name
resolves to another address (as on most cloud machines, where it is the LAN's).

The cluster runs in a mount namespace whose /etc/hosts maps the hostname to another
local address; every listening socket of the whole process tree (kernel, controller
and its schedulers, engines and their nannies, with gloo, the store and the metrics
collector) must be on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import textwrap
from pathlib import Path

import psutil
import pytest

from .isolated import run_isolated

pytestmark = pytest.mark.timeout(200)

SCRIPT = textwrap.dedent(
    """
    import json, socket, threading, time
    import psutil
    from dist_notebook import ClusterSpec, DistCluster
    from dist_notebook.training import RunSpec, TrainingRun

    def listening():
        found = set()
        procs = [psutil.Process()] + psutil.Process().children(recursive=True)
        for proc in procs:
            try:
                conns = proc.net_connections(kind="inet")
            except psutil.NoSuchProcess:
                continue
            found |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
        return found

    print("HOSTNAME", socket.gethostbyname(socket.gethostname()), flush=True)
    cluster = DistCluster(ClusterSpec(n=2))
    cluster.start_sync()
    seen = listening()
    code = "import time\\nreport(step=0, loss=1.0)\\ntime.sleep(2)\\n"
    run = TrainingRun(cluster, RunSpec(code=code, name="listen"))
    thread = threading.Thread(target=run.run)
    thread.start()
    time.sleep(1.0)  # the collector and the ranks' channels are open
    seen |= listening()
    thread.join(60)
    cluster.stop_sync()
    print("LISTENING " + json.dumps(sorted(seen)), flush=True)
    """
)


def other_local_address() -> str:
    """A non-loopback address of this machine if it has one, else another loopback one."""
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return "127.0.0.2"


def test_every_listener_is_on_the_cluster_address(tmp_path: Path, throwaway_store: str) -> None:
    other = other_local_address()
    hosts = tmp_path / "hosts"
    name = socket.gethostname()
    hosts.write_text(f"127.0.0.1 localhost\n{other} {name}\n")
    proc = run_isolated(SCRIPT, hosts=hosts)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert lines["HOSTNAME"] == other, "the namespace's /etc/hosts was not used"
    assert json.loads(lines["LISTENING"]) == ["127.0.0.1"]
