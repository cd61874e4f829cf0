"""The keeper's loopback port, as any local user can reach it (a real detached cluster).

Anyone on the machine can find the port (``/proc/net/tcp``). What they send there must
cost the keeper nothing it cannot bound, and tell them nothing: a 300 MB frame does not
grow the keeper (its peak resident memory, ``VmHWM``, stays within a few MB), an
unsigned probe gets no answer at all (none that names the service), and a signed
request seen once is refused when sent again (its nonce). Through all of it the keeper
serves its owner: the cluster is ready and its ranks run cells.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from dist_notebook.cluster.spec import ClusterSpec
from dist_notebook.detached.attached import AttachedCluster, start_detached
from dist_notebook.detached.link import pack

pytestmark = pytest.mark.timeout(240)

BIG = 300 << 20
GROWTH_LIMIT = 64 << 20  # the keeper's peak may move by this much, never by a frame


def peak_rss(pid: int) -> int:
    """The process's peak resident memory (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def raw_answer(endpoint: str, send: bytes, wait: float = 2.0) -> bytes:
    """What the port says to a plain TCP client that sends *send* (no ZMQ)."""
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    got = b""
    with socket.create_connection((host, int(port)), timeout=wait) as s:
        s.sendall(send)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            got += chunk
    return got


@pytest.fixture
def detached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("DIST_NOTEBOOK_STORE", str(tmp_path / "runs.sqlite"))
    cluster: AttachedCluster | None = None
    try:
        cluster = start_detached(ClusterSpec(n=2, threads=1), None, progress=lambda _: None)
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop_sync()


def test_big_unsigned_frames_and_probes_cost_and_tell_nothing(detached: Any) -> None:
    cluster = detached
    endpoint, pid = cluster.link.file.endpoint, cluster.keeper_pid
    before = peak_rss(pid)
    big = b"x" * BIG
    ctx = zmq.Context()
    try:
        for _ in range(3):
            sock = ctx.socket(zmq.REQ)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVTIMEO, 3000)
            sock.connect(endpoint)
            sock.send_multipart([b"0" * 64, big], copy=False)
            # No answer, not even a refusal: a timeout, or (the connection dropped at the
            # handshake) a REQ socket reset to sending (EFSM).
            with pytest.raises(zmq.ZMQError):
                sock.recv_multipart()
            sock.close()
        # A small unsigned probe: no answer either, so nothing names what listens.
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 3000)
        sock.connect(endpoint)
        body = json.dumps({"op": "info", "args": {}, "t": time.time()}).encode()
        sock.send_multipart([b"0" * 64, body])
        with pytest.raises(zmq.ZMQError):
            sock.recv_multipart()
        sock.close()
    finally:
        ctx.destroy(linger=0)
    del big
    grown = peak_rss(pid) - before
    assert grown < GROWTH_LIMIT, f"the keeper's peak grew by {grown >> 20} MB"
    said = raw_answer(endpoint, b"\xff" + b"\x00" * 8 + b"\x7f" + b"hello?" * 20)
    for word in (b"keeper", b"dist", b"signature", b"cluster", b"refused"):
        assert word not in said.lower(), said
    assert cluster.refresh()["state"] == "ready"  # it serves its owner still
    client = cluster.require_ready()
    client[:].execute("answer = 6 * 7", block=True)
    assert client[:].pull("answer", block=True) == [42, 42]


def test_a_signed_request_is_accepted_once(detached: Any) -> None:
    cluster = detached
    link = cluster.link
    frames = pack(link._key, {"op": "info", "args": {}})

    def send(frames: list[bytes]) -> dict[str, Any]:
        sock = link.connect(timeout=10.0)
        try:
            sock.send_multipart(frames)
            return json.loads(sock.recv_multipart()[1])
        finally:
            sock.close()

    first = send(frames)
    assert first.get("result", {}).get("id") == cluster.id, first
    again = send(frames)  # the same bytes, well within the freshness window
    assert "replayed" in again.get("error", ""), again
    assert "result" not in again
    assert cluster.refresh()["state"] == "ready"
