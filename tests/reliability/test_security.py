"""Loopback only, signed messages, owner-only files."""

from __future__ import annotations

import glob
import hashlib
import hmac
import json
import os
import stat
import time
from typing import Any

import psutil
import pytest
import zmq

from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import wire_message
from dist_notebook.training.collector import Collector

pytestmark = pytest.mark.timeout(60)


def listening(pid: int) -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


def store_port(shell: Any) -> int:
    """The port of rank 0's rendezvous store (a TCPStore of torch's)."""
    expr = "__import__('dist_notebook.engine.group',fromlist=['g'])._master_store.port"
    return int(shell.run_line_magic("dist_pull", expr))


def test_controller_and_engines_listen_on_loopback_only(shell: Any, cluster2: Any) -> None:
    pids = [r.pid for r in cluster2.ranks] + [cluster2.engines.controller_pid]
    rendezvous = store_port(shell)
    sockets = {pid: listening(pid) for pid in pids}
    assert any(sockets.values())
    for pid, addrs in sockets.items():
        others = {a for a in addrs if a[1] != rendezvous}
        assert {ip for ip, _ in others} <= {"127.0.0.1"}, (pid, addrs)


def test_rendezvous_store_listens_on_loopback_only(shell: Any, cluster2: Any) -> None:
    port = store_port(shell)
    addrs = listening(cluster2.ranks[0].pid)
    assert {ip for ip, p in addrs if p == port} == {"127.0.0.1"}, addrs


def test_ipyparallel_messages_are_signed(cluster2: Any) -> None:
    security = os.path.join(cluster2.profile_dir, "security")
    cid = cluster2.engines.ipp_cluster_id
    files = glob.glob(os.path.join(security, f"ipcontroller-{cid}-*.json"))
    assert sorted(os.path.basename(f) for f in files) == [
        f"ipcontroller-{cid}-client.json",
        f"ipcontroller-{cid}-engine.json",
    ]
    for path in files:
        with open(path) as f:
            info = json.load(f)
        assert len(info["key"]) >= 32 and info["signature_scheme"] == "hmac-sha256"
        assert info["location"] and info["interface"] == "tcp://127.0.0.1"
    assert cluster2.client.session.key  # the client signs what it sends


def test_connection_files_and_store_are_owner_only(cluster2: Any, throwaway_store: str) -> None:
    security = os.path.join(cluster2.profile_dir, "security")
    cid = cluster2.engines.ipp_cluster_id
    ours = glob.glob(os.path.join(security, f"*{cid}*.json"))
    assert len(ours) == 3, ours  # client, engine and the cluster file
    assert stat.S_IMODE(os.stat(security).st_mode) & 0o077 == 0
    for path in ours + [throwaway_store]:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
    assert stat.S_IMODE(os.stat(cluster2.stack_dir).st_mode) == 0o700
    for path in glob.glob(os.path.join(cluster2.stack_dir, "*")):
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0, path


def test_metrics_channel_drops_unsigned_and_wrongly_signed() -> None:
    key = os.urandom(32)
    collector = Collector("run1", key, RunMetrics([0]), writer=None)
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 1000)
    try:
        assert collector.endpoint.startswith("tcp://127.0.0.1:")
        port = int(collector.endpoint.rsplit(":", 1)[1])
        assert ("127.0.0.1", port) in listening(os.getpid())
        push.connect(collector.endpoint)
        row = [1, time.time(), None, None, None, {}, None]
        payload = json.dumps(wire_message("run1", 0, [row])).encode()
        good = hmac.new(key, payload, hashlib.sha256).digest()
        wrong = hmac.new(os.urandom(32), payload, hashlib.sha256).digest()
        push.send_multipart([payload])  # unsigned
        push.send_multipart([b"", payload])  # empty signature
        push.send_multipart([wrong, payload])  # another key
        push.send_multipart([good, payload + b" "])  # a payload changed after signing
        push.send_multipart([good, payload])  # the only good one
        deadline = time.monotonic() + 10
        while collector.received + collector.rejected < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (collector.received, collector.rejected) == (1, 4)
    finally:
        push.close()
        collector.close()


def test_cluster_files_are_owner_only(cluster2: Any) -> None:
    from dist_notebook.cluster.reap import cluster_files

    files = cluster_files(cluster2.profile_dir, cluster2.engines.ipp_cluster_id)
    assert any("ipengine" in os.path.basename(f) for f in files), files
    modes = {f: stat.S_IMODE(os.stat(f).st_mode) for f in files}
    assert all(mode & 0o077 == 0 for mode in modes.values()), modes
