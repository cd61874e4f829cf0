"""The kernel's side of the fork server (``boot.forkserver``): start it, ask it for
engines, learn how they ended.

``prestart()`` runs at ``%load_ext dist_notebook``: the server imports torch and
ipyparallel's engine while the user writes the next cell, and a local cluster's engines
are then forked from it (``cluster.launchers``) instead of each importing them again.
One server per kernel, owned by it: closed at interpreter exit, and it ends by itself
when the kernel dies (EOF on its stdin, and its parent watch). Set
``DIST_NOTEBOOK_FORKSERVER=0`` in the kernel's environment to spawn every engine as a
fresh process instead (what remote launchers always do).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from .. import envvars
from ..engine.parent import ENV_VAR as PARENT_ENV

log = logging.getLogger("dist_notebook")
ENV_SWITCH = envvars.FORKSERVER
SERVER_CMD = [sys.executable, "-u", "-m", "dist_notebook.boot.forkserver"]
READY_TIMEOUT = 120.0  # its imports: ~2.3 s on a quiet 2-core machine
REPLY_TIMEOUT = 10.0
# The server forks a request only this long before the kernel stops waiting for it: a
# request the kernel gave up on (it spawns that engine instead) is never forked later.
FORK_MARGIN_S = 1.0
# A start of at least this many local ranks per core has the server do its warm imports
# (torch._dynamo for DDP, ``boot.forkserver._warm``: 1-2 CPU-s, once) before its first
# fork, so every engine has them in shared pages. Otherwise each engine imports them
# after the start (``engine.group._warm_after_start``): 64 ranks on 2 cores burned about
# 100 CPU-s that way, slowing the first cells for most of a minute.
WARM_FIRST_RANKS_PER_CORE = 4


class ForkServerError(RuntimeError):
    """The fork server could not start an engine (the caller spawns one instead)."""


class ForkServer:
    """A running fork server and the reader of its replies and exit notices."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env[PARENT_ENV] = str(os.getpid())
        self.proc = subprocess.Popen(
            SERVER_CMD,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a Ctrl-C to the kernel's process group is not ours
        )
        self.pid = self.proc.pid
        self._cond = threading.Condition()
        self._ready = False
        self._error = ""
        self._closed = False
        self._replies: dict[int, dict[str, Any]] = {}
        self._exits: dict[int, int] = {}
        self._next_id = 0
        self._abandoned: set[int] = set()
        self._warmed = False
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(
            target=self._read, name="dist-notebook-forkserver", daemon=True
        )
        self._reader.start()

    # --- reading -------------------------------------------------------------
    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                continue  # not ours: the protocol is JSON lines only
            with self._cond:
                if "ready" in message:
                    self._ready = True
                elif "warmed" in message:
                    self._warmed = True
                elif "exit" in message:
                    self._exits[int(message["exit"])] = int(message["code"])
                elif "id" in message:
                    request_id = int(message["id"])
                    if request_id in self._abandoned:
                        self._end_stray(request_id, message)
                    else:
                        self._replies[request_id] = message
                elif "error" in message:
                    self._error = str(message["error"])
                self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._error = self._error or f"the fork server exited ({self.proc.wait()})"
            self._cond.notify_all()

    @property
    def alive(self) -> bool:
        with self._cond:
            return not self._closed

    @property
    def error(self) -> str:
        """Why the server failed or ended ("" while it serves)."""
        with self._cond:
            return self._error

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> bool:
        """Wait until the server has its imports done; False if it failed or died."""
        with self._cond:
            self._cond.wait_for(lambda: self._ready or self._closed, timeout)
            return self._ready and not self._closed

    # --- requests ------------------------------------------------------------
    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, output: str) -> int:
        """Fork an engine (``boot.engine`` with *argv*) and return its pid."""
        if not self.wait_ready():
            raise ForkServerError(self._error or "the fork server is not ready")
        if warm_first(env):
            self.warm()
        with self._cond:
            self._next_id += 1
            request_id = self._next_id
        line = json.dumps(
            {
                "id": request_id,
                "argv": argv,
                "env": env,
                # resolved here, as a spawned engine's working directory is: the kernel's
                # own now, not the server's at its start
                "cwd": os.path.abspath(cwd),
                "output": output,
                "deadline": time.time() + REPLY_TIMEOUT - FORK_MARGIN_S,
            }
        )
        assert self.proc.stdin is not None
        try:
            with self._write_lock:
                self.proc.stdin.write(line.encode() + b"\n")
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as e:
            raise ForkServerError(f"the fork server is gone: {e}") from e
        with self._cond:
            self._cond.wait_for(lambda: request_id in self._replies or self._closed, REPLY_TIMEOUT)
            reply = self._replies.pop(request_id, None)
            if reply is None:
                self._abandoned.add(request_id)  # a late fork of it is ended at once
        if reply is None or "pid" not in reply:
            why = (reply or {}).get("error") or self._error or "no reply"
            raise ForkServerError(f"the fork server did not start the engine: {why}")
        return int(reply["pid"])

    def warm(self, timeout: float = READY_TIMEOUT) -> bool:
        """Have the server do its warm imports now (at once if it has them); True once
        it has. A server that does not answer in time leaves its engines to import them."""
        with self._cond:
            if self._warmed:
                return True
        assert self.proc.stdin is not None
        try:
            with self._write_lock:
                self.proc.stdin.write(b'{"warm": true}\n')
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            return False
        with self._cond:
            self._cond.wait_for(lambda: self._warmed or self._closed, timeout)
            if not self._warmed:
                # Asked once: the engines import it themselves (a slower first cell only).
                self._warmed = True
                log.info("fork server: no warm imports within %.0f s", timeout)
                return False
            return True

    def _end_stray(self, request_id: int, message: dict[str, Any]) -> None:
        """A reply to a request the kernel gave up on: the engine it forked (if it did)
        would be a second copy of a rank the kernel spawned meanwhile."""
        self._abandoned.discard(request_id)
        pid = message.get("pid")
        if isinstance(pid, int):
            log.warning("fork server: ending engine %d, forked after the kernel gave up on it", pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return

    def wait_exit(self, pid: int, stop: threading.Event, poll: float = 1.0) -> int | None:
        """Block until engine *pid* ends and return its exit code (negative: signal).
        None if *stop* is set first or the server is gone (its engines end with it;
        the caller then waits for the process itself)."""
        with self._cond:
            while pid not in self._exits:
                if stop.is_set() or self._closed:
                    return None
                self._cond.wait(poll)
            return self._exits.pop(pid)

    def close(self, timeout: float = 5.0) -> None:
        """End the server (EOF on its stdin); its engines end with it."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                log.debug("the fork server had already exited")
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)
        self._reader.join(timeout)


def warm_first(env: dict[str, str]) -> bool:
    """Whether an engine of *env*'s cluster should be forked only after the warm
    imports: its world has WARM_FIRST_RANKS_PER_CORE ranks or more per core."""
    try:
        ranks = int(env.get(envvars.WORLD_SIZE, "0"))
    except ValueError:
        return False
    return ranks >= WARM_FIRST_RANKS_PER_CORE * (os.cpu_count() or 1)


_lock = threading.Lock()
_server: ForkServer | None = None


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def prestart() -> ForkServer | None:
    """Start this kernel's fork server if it is not running (and not switched off)."""
    global _server
    if not enabled():
        return None
    with _lock:
        if _server is None or not _server.alive:
            try:
                _server = ForkServer()
            except OSError as e:
                log.warning("dist-notebook: no fork server (%s); engines start as processes", e)
                _server = None
        return _server


def current() -> ForkServer | None:
    """The running fork server, if any (started by ``prestart``)."""
    with _lock:
        return _server if _server is not None and _server.alive else None


def close() -> None:
    """End the fork server (at interpreter exit, ``%unload_ext``, or a test's end)."""
    global _server
    with _lock:
        server, _server = _server, None
    if server is not None:
        server.close()


atexit.register(close)
