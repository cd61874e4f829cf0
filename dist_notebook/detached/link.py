"""The link between a kernel and the keeper of a detached cluster (detached/keeper.py).

A detached cluster is held by a keeper process of its own, not by the kernel that
started it; kernels attach to it and ask it for what only the cluster's holder can do
(stop, restart, a training run, who is attached). Requests and replies are JSON over a
ZMQ REQ/REP pair on loopback. What a kernel needs is in the keeper's file
``keeper.json``, which only the cluster's owner can read (mode 0600, in the cluster's
own profile folder, mode 0700): the CURVE keys of the link and an HMAC-SHA256 key.

Any local user can find the loopback port, so:

- the socket is a CURVE server that admits only the client key of the file: a peer
  without it never gets past the handshake, so not one byte of what it sends is read
  as a message, and nothing it gets back names the service (a ZMQ handshake error);
- a frame over ``MAX_MESSAGE_BYTES`` ends its connection inside ZMQ, before it is
  buffered, and at most ``RCVHWM`` messages wait per connection;
- every request is signed, carries the time and a nonce: one older than ``FRESH_S``,
  or whose nonce the keeper has seen, is refused (a replay); the reply names the
  request's nonce, and the keeper answers at most ``RATE`` requests a second.

A fresh REQ socket per request: a keeper that does not answer in time costs that
request only, never the next one (a REQ socket after a lost reply is stuck).

    link = KeeperLink.load(path)            # a kernel: the keeper's file
    link.request("info", kernel=os.getpid())
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import zmq

from .. import envvars
from ..privatedir import UnsafeDirectoryError, check_private

FILE = "keeper.json"
FRESH_S = 60.0  # a request older than this (or from this far ahead) is refused
REQUEST_TIMEOUT_S = 10.0
# A request carries a cell's code (a training run): far below this. A larger frame ends
# its connection inside ZMQ when its length is read, before anything is allocated for it.
MAX_MESSAGE_BYTES = 16 << 20
RCVHWM = 4  # messages that may wait per connection; beyond that ZMQ holds the sender back
RATE = 200.0  # requests answered a second at most (a kernel sends a few a cell)


class KeeperError(RuntimeError):
    """The keeper refused a request, or is not there; the message names the fix."""


class KeeperGone(KeeperError):
    """The keeper did not answer: its cluster stopped, or the keeper was killed."""


@dataclass(frozen=True)
class KeeperFile:
    """What a kernel needs to reach a keeper: written by the keeper, read by kernels."""

    cluster_id: str
    pid: int
    endpoint: str
    key: str  # hex
    profile_dir: str
    client_file: str  # the ipyparallel client's connection file
    idle_timeout: float | None
    started: float
    # The link's CURVE keys (Z85): the keeper's public key, and the one client key it
    # admits (the kernels' own, for the handshake).
    server_key: str = ""
    client_public: str = ""
    client_secret: str = ""

    def write(self, path: Path) -> None:
        """Owner-only from its first byte (made 0600, then filled, then moved in)."""
        partial = path.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(self), f)
        os.replace(partial, path)

    @classmethod
    def read(cls, path: Path) -> KeeperFile:
        check_private(path.parent)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            raise KeeperGone(f"{path} is gone: its cluster has stopped") from None
        except PermissionError:
            raise KeeperError(
                f"{path} cannot be read: the cluster belongs to another user, who alone "
                "can attach to it"
            ) from None
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise KeeperError(
                f"{path} is not a private file of yours (mode {stat.S_IMODE(info.st_mode):o},"
                f" uid {info.st_uid}): remove it and start the cluster again"
            )
        with open(path) as f:
            return cls(**json.load(f))


class OneClient:
    """The ZAP check of a CURVE server socket of ours: the one client key it was made
    with (a peer with any other never completes the handshake)."""

    def __init__(self, public: bytes) -> None:
        self.public = public

    def callback(self, domain: str, key: bytes) -> bool:
        return secrets.compare_digest(key, self.public)


def sign(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode()


def pack(key: bytes, message: dict[str, Any]) -> list[bytes]:
    """A signed pair of frames: the message with its time and a fresh nonce (``n``)."""
    body = json.dumps({**message, "t": time.time(), "n": secrets.token_hex(16)}).encode()
    return [sign(key, body), body]


def unpack(key: bytes, frames: list[bytes]) -> dict[str, Any]:
    """The message of a signed pair of frames; KeeperError if unsigned or stale."""
    if len(frames) != 2 or not hmac.compare_digest(frames[0], sign(key, frames[1])):
        raise KeeperError("a message without the cluster's signature was refused")
    message = json.loads(frames[1])
    if not isinstance(message, dict):
        raise KeeperError("a message that is not a JSON object was refused")
    t = message.get("t", 0)
    if not isinstance(t, int | float) or not abs(time.time() - float(t)) <= FRESH_S:
        raise KeeperError("a stale message was refused")
    return message


class Nonces:
    """The nonces of the requests of the last ``FRESH_S`` seconds: a request is taken
    once (an older one is refused as stale, so older nonces need not be kept)."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}

    def take(self, message: dict[str, Any]) -> None:
        """Raise KeeperError if *message* (signed and fresh) has no nonce or a seen one."""
        now = time.monotonic()
        if len(self._seen) > 1000:
            self._seen = {n: t for n, t in self._seen.items() if now - t <= 2 * FRESH_S}
        nonce = message.get("n")
        if not isinstance(nonce, str) or not nonce:
            raise KeeperError("a request without a nonce was refused")
        if nonce in self._seen:
            raise KeeperError("a replayed request was refused (its nonce was used)")
        self._seen[nonce] = now


class KeeperLink:
    """A kernel's side: signed requests to one keeper."""

    def __init__(self, file: KeeperFile) -> None:
        self.file = file
        self._key = bytes.fromhex(file.key)
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()

    @classmethod
    def load(cls, path: Path) -> KeeperLink:
        return cls(KeeperFile.read(path))

    def connect(self, timeout: float) -> zmq.Socket[bytes]:
        """A REQ socket connected to the keeper with the link's CURVE keys."""
        file = self.file
        if not (file.server_key and file.client_public and file.client_secret):
            raise KeeperError(
                f"the keeper file of cluster {file.cluster_id} holds no link keys (a keeper "
                "of an older dist-notebook): stop it from the kernel that started it, or "
                f"end its keeper (kill {file.pid}), then start the cluster again"
            )
        sock = self._ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
        sock.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        sock.curve_serverkey = file.server_key.encode()
        sock.curve_publickey = file.client_public.encode()
        sock.curve_secretkey = file.client_secret.encode()
        sock.connect(file.endpoint)
        return sock

    def request(self, op: str, timeout: float = REQUEST_TIMEOUT_S, **args: Any) -> Any:
        """The keeper's answer to *op*; KeeperError with its reason if it refused,
        KeeperGone if it did not answer within *timeout* seconds."""
        frames = pack(self._key, {"op": op, "args": args})
        size = sum(len(f) for f in frames)
        if size > MAX_MESSAGE_BYTES:
            raise KeeperError(
                f"the {op} request is {size / 2**20:.1f} MB, more than a detached cluster's "
                f"keeper takes ({MAX_MESSAGE_BYTES >> 20} MB): send large data with "
                "%dist_push, not in the cell's code"
            )
        nonce = json.loads(frames[1])["n"]
        sock = self.connect(timeout)
        try:
            sock.send_multipart(frames)
            try:
                reply = unpack(self._key, sock.recv_multipart())
            except zmq.Again:
                raise KeeperGone(
                    f"the keeper of cluster {self.file.cluster_id} (pid {self.file.pid}) did"
                    f" not answer within {timeout:.0f} s"
                ) from None
        finally:
            sock.close()
        if reply.get("re") != nonce:
            raise KeeperError(
                f"the keeper of cluster {self.file.cluster_id} answered another request: try again"
            )
        if "error" in reply:
            raise KeeperError(str(reply["error"]))
        return reply.get("result")


def keeper_files(base: Path) -> list[Path]:
    """The keeper files of this user's detached clusters under *base* (the folder of
    the clusters' profile folders), newest first."""
    try:
        if not base.is_dir():
            return []
        if base.stat().st_uid != os.getuid():
            raise PermissionError(base)
        check_private(base)
        found = [p / FILE for p in base.glob("cluster-*") if (p / FILE).is_file()]
        return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)
    except PermissionError:
        owner = _owner_of(base)
        raise KeeperError(
            f"the clusters in {base} belong to {owner}: only their owner can attach to them "
            f"(set {envvars.STORE} to a run store of your own)"
        ) from None
    except UnsafeDirectoryError as e:
        raise KeeperError(str(e)) from None


def _owner_of(path: Path) -> str:
    """Who owns *path* (or the nearest folder above it we may look at), in words."""
    for folder in (path, *path.parents):
        try:
            uid = folder.stat().st_uid
        except PermissionError:
            continue
        return "you" if uid == os.getuid() else f"another user (uid {uid})"
    return "another user"
