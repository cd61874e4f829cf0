"""The link between a kernel and the keeper of a detached cluster (detached/keeper.py).

A detached cluster is held by a keeper process of its own, not by the kernel that
started it; kernels attach to it and ask it for what only the cluster's holder can do
(stop, restart, a training run, who is attached). Requests and replies are JSON over a
ZMQ REQ/REP pair on loopback, signed with HMAC-SHA256 under a key that only the
cluster's owner can read: the keeper's file ``keeper.json`` (mode 0600, in the cluster's
own profile folder, mode 0700). A request without the key's signature, or older than
``FRESH_S``, is refused. A fresh REQ socket per request: a keeper that does not answer
in time costs that request only, never the next one (a REQ socket after a lost reply
is stuck).

    link = KeeperLink.load(path)            # a kernel: the keeper's file
    link.request("info", kernel=os.getpid())
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
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


def sign(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode()


def pack(key: bytes, message: dict[str, Any]) -> list[bytes]:
    body = json.dumps({**message, "t": time.time()}).encode()
    return [sign(key, body), body]


def unpack(key: bytes, frames: list[bytes]) -> dict[str, Any]:
    """The message of a signed pair of frames; KeeperError if unsigned or stale."""
    if len(frames) != 2 or not hmac.compare_digest(frames[0], sign(key, frames[1])):
        raise KeeperError("a message without the cluster's signature was refused")
    message = json.loads(frames[1])
    if not isinstance(message, dict) or abs(time.time() - float(message.get("t", 0))) > FRESH_S:
        raise KeeperError("a stale message was refused")
    return message


class KeeperLink:
    """A kernel's side: signed requests to one keeper."""

    def __init__(self, file: KeeperFile) -> None:
        self.file = file
        self._key = bytes.fromhex(file.key)
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()

    @classmethod
    def load(cls, path: Path) -> KeeperLink:
        return cls(KeeperFile.read(path))

    def request(self, op: str, timeout: float = REQUEST_TIMEOUT_S, **args: Any) -> Any:
        """The keeper's answer to *op*; KeeperError with its reason if it refused,
        KeeperGone if it did not answer within *timeout* seconds."""
        sock = self._ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
        sock.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
        try:
            sock.connect(self.file.endpoint)
            sock.send_multipart(pack(self._key, {"op": op, "args": args}))
            try:
                reply = unpack(self._key, sock.recv_multipart())
            except zmq.Again:
                raise KeeperGone(
                    f"the keeper of cluster {self.file.cluster_id} (pid {self.file.pid}) did"
                    f" not answer within {timeout:.0f} s"
                ) from None
        finally:
            sock.close()
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
