"""The breakpoint relay's port, as any local user can reach it: the kernel's REP socket
that ranks' pdb sessions talk to (magics/breakpoints.py). A peer without the ranks' CURVE
key (a plain ZMQ client, or one with a key of its own) is never answered and nothing it
sends is written into the notebook's cell; a rank with the key is answered as before.
Real sockets on loopback, no cluster."""

from __future__ import annotations

from typing import Any

import pytest
import zmq

from dist_notebook.magics.breakpoints import BreakpointRelay

pytestmark = pytest.mark.timeout(60)

PLANTED = "planted by another user\n"


@pytest.fixture
def relay() -> BreakpointRelay:
    relay = BreakpointRelay(shell=None, session=None, auto=None)
    relay._start("127.0.0.1")
    return relay


def _ask(endpoint: str, message: dict[str, Any], keys: dict[str, str] | None) -> Any:
    """The relay's answer to *message* within 3 s, or None."""
    ctx = zmq.Context()
    try:
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            sock.curve_serverkey = keys["server"].encode()
            sock.curve_publickey = keys["public"].encode()
            sock.curve_secretkey = keys["secret"].encode()
        sock.connect(endpoint)
        sock.send_json(message)
        return sock.recv_json() if sock.poll(3000) else None
    finally:
        ctx.destroy(linger=0)


def test_a_peer_without_the_key_is_never_read(relay: BreakpointRelay, capsys: Any) -> None:
    message = {"rank": 0, "output": PLANTED, "prompt": None}
    assert _ask(relay.endpoint, message, None) is None  # answered {"line": "c"} before
    public, secret = zmq.curve_keypair()
    own = {"server": relay.keys["server"], "public": public.decode(), "secret": secret.decode()}
    assert _ask(relay.endpoint, message, own) is None
    assert PLANTED not in capsys.readouterr().out  # nothing reached the cell
    assert not relay._stopped  # nor counted as a rank's pdb


def test_a_rank_with_the_key_is_answered(relay: BreakpointRelay, capsys: Any) -> None:
    reply = _ask(relay.endpoint, {"rank": 0, "output": "> here\n", "prompt": None}, relay.keys)
    assert reply == {"line": "c"}
    assert "> here" in capsys.readouterr().out
    assert _ask(relay.endpoint, {"rank": 0, "output": "", "prompt": "(Pdb) "}, relay.keys) == {
        "line": "c"  # no running cell: the rank goes on
    }
