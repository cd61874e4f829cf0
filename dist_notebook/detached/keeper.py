"""The keeper of a detached cluster: ``python -m dist_notebook.cluster.keeper``.

``%dist_cluster start --detach`` starts this process instead of the cluster itself: it
runs in a session of its own (a kernel's restart, shutdown or SIGKILL does not reach it)
and holds the cluster as a kernel holds an attached one: the ipyparallel controller and
the engines are its children (its own fork server forks them), the run-store writer is
its, and so are the training runs (their metrics collector included) that kernels ask it
for, so a run goes on, every record stored, while no kernel is there. Kernels attach to
it (detached/attached.py), execute cells on the engines through their own ipyparallel
client, and ask it for the rest over the signed link (detached/link.py).

It ends when the cluster is stopped (``%dist_cluster stop``, the panel's Stop, SIGTERM)
or, with an idle timeout, once nobody used the cluster for that long: no kernel
attached, no run, no task on an engine. Its stop is the cluster's own (every process of
the tree, then the profile folder with the keeper's file and log): nothing is left.

Start-up protocol (JSON lines): the kernel writes ``{"spec": {...}, "idle_timeout": S}``
on our stdin; we print ``{"progress": "..."}`` lines, then ``{"ready": {...}}`` (the
keeper file's path) or ``{"error": "..."}``, and close stdout.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from ..cluster.spec import ClusterSpec
from ..contracts import DetachedModel
from ..protocol import ACTIVE_RUN_STATES, ClusterState
from .kepthistory import KeptHistory
from .link import (
    FILE,
    MAX_MESSAGE_BYTES,
    RATE,
    RCVHWM,
    KeeperError,
    KeeperFile,
    Nonces,
    OneClient,
    pack,
    sign,
    unpack,
)

if TYPE_CHECKING:
    from ..cluster.cluster import DistCluster

log = logging.getLogger("dist_notebook")
POLL_S = 0.5  # the serving loop's wake-up: idle and stop checks


def spec_from_json(data: dict[str, Any]) -> ClusterSpec:
    """A ClusterSpec from ``asdict``'s JSON (lists back to the tuples it holds)."""
    data = dict(data)
    data["gpus"] = tuple(data.get("gpus", ()))
    data["hosts"] = tuple((h, int(n)) for h, n in data.get("hosts", ()))
    return ClusterSpec(**data)


def spec_to_json(spec: ClusterSpec) -> dict[str, Any]:
    return asdict(spec)


def _alive(pid: int | None) -> bool:
    from ..store.reader import kernel_alive

    return pid is not None and kernel_alive(pid)


def _nonce_of(key: bytes, frames: list[bytes]) -> str | None:
    """The nonce of a signed request (for its reply), whatever else is wrong with it."""
    if len(frames) != 2 or not secrets.compare_digest(frames[0], sign(key, frames[1])):
        return None
    try:
        nonce = json.loads(frames[1]).get("n")
    except (ValueError, AttributeError):
        return None
    return nonce if isinstance(nonce, str) else None


class Keeper:
    """Holds one started cluster and answers its kernels until the cluster stops."""

    def __init__(self, cluster: DistCluster, idle_timeout: float | None) -> None:
        self.cluster = cluster
        self.idle_timeout = idle_timeout
        self.holder: int | None = None  # the attached kernel's pid
        self.taken_from: dict[int, int] = {}  # {kernel pid: the pid that took over}
        self.runs: dict[str, Any] = {}
        self.run_threads: list[threading.Thread] = []
        self.history = KeptHistory()  # what every kernel ran on the ranks (%dist_export)
        self.idle_since = time.monotonic()
        self._key = secrets.token_bytes(32)
        self._nonces = Nonces()
        self._answered: list[float] = []  # when the last RATE requests were answered
        # A context of its own: its ZAP handler (the client key check) is for this
        # socket, never for the cluster's ipyparallel client in this process.
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._server_public, server_secret = zmq.curve_keypair()
        self._client_public, self._client_secret = zmq.curve_keypair()
        self._auth = ThreadAuthenticator(self._ctx, log=logging.getLogger("dist_notebook.zap"))
        self._auth.start()
        self._auth.configure_curve_callback("*", OneClient(self._client_public))
        self._sock = self._ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self._sock.setsockopt(zmq.RCVHWM, RCVHWM)
        self._sock.curve_server = True
        self._sock.curve_secretkey = server_secret
        port = self._sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.path = Path(cluster.profile_dir) / FILE
        self._stop_requested = threading.Event()

    # --- the keeper's file -------------------------------------------------------
    def write_file(self) -> Path:
        client_file = self.cluster.client_file
        assert client_file, "the keeper writes its file for a started cluster"
        KeeperFile(
            cluster_id=self.cluster.id,
            pid=os.getpid(),
            endpoint=self.endpoint,
            key=self._key.hex(),
            profile_dir=self.cluster.profile_dir,
            client_file=client_file,
            idle_timeout=self.idle_timeout,
            started=time.time(),
            server_key=self._server_public.decode(),
            client_public=self._client_public.decode(),
            client_secret=self._client_secret.decode(),
        ).write(self.path)
        return self.path

    # --- serving -----------------------------------------------------------------
    def serve(self) -> None:
        """Answer requests until the cluster stops (by a request, the panel, SIGTERM,
        or the idle timeout)."""
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while self.cluster.state not in (ClusterState.STOPPED, ClusterState.NEW):
            if self._stop_requested.is_set():
                self.cluster.owner.stop("the keeper was asked to end (SIGTERM)")
                break
            if dict(poller.poll(int(POLL_S * 1000))):
                self._answer()
            if self._idle_too_long():
                log.info(
                    "cluster %s: idle for %.0f s, stopping", self.cluster.id, self.idle_timeout
                )
                self.cluster.owner.stop("idle timeout")
                break
        self._sock.close()
        self._auth.stop()
        self._ctx.destroy(linger=0)

    def request_stop(self) -> None:
        self._stop_requested.set()

    def _answer(self) -> None:
        self._hold_to_rate()
        frames = self._sock.recv_multipart()
        re = _nonce_of(self._key, frames)
        try:
            message = unpack(self._key, frames)
            self._nonces.take(message)
        except (KeeperError, ValueError) as e:
            log.warning("keeper: %s", e)
            self._sock.send_multipart(pack(self._key, {"error": str(e), "re": re}))
            return
        op, args = message.get("op"), message.get("args") or {}
        handler = getattr(self, f"op_{op}", None)
        try:
            if handler is None or not isinstance(args, dict):
                raise KeeperError(f"unknown request {op!r}")
            reply: dict[str, Any] = {"result": handler(**args)}
        except Exception as e:  # every refusal goes back to the kernel as its message
            reply = {"error": str(e) or type(e).__name__}
        self._sock.send_multipart(pack(self._key, {**reply, "re": re}))

    def _hold_to_rate(self) -> None:
        """At most RATE requests a second: a flood waits in ZMQ (RCVHWM a connection,
        then the sender is held back), never in this process's memory or CPU."""
        now = time.monotonic()
        self._answered = [t for t in self._answered if now - t < 1.0]
        if len(self._answered) >= RATE:
            time.sleep(max(0.0, 1.0 - (now - self._answered[0])))
        self._answered.append(time.monotonic())

    def _idle_too_long(self) -> bool:
        if self.idle_timeout is None:
            return False
        if _alive(self.holder) or self._active_run() is not None or self._engines_busy():
            self.idle_since = time.monotonic()
            return False
        return time.monotonic() - self.idle_since > self.idle_timeout

    def idle_seconds(self) -> float:
        return time.monotonic() - self.idle_since

    def _active_run(self) -> Any:
        return self.cluster.owner.active_run()

    def _engines_busy(self) -> bool:
        client = self.cluster.client
        if client is None:
            return False
        try:
            status = client.queue_status()
        except Exception as e:  # the controller is going: the stop check ends us
            log.debug("queue status: %s", e)
            return False
        return any(
            isinstance(s, dict) and (s.get("queue", 0) or s.get("tasks", 0))
            for s in status.values()
        )

    # --- requests ------------------------------------------------------------------
    def _check_holder(self, kernel: int) -> None:
        if kernel in self.taken_from:
            raise KeeperError(
                f"cluster {self.cluster.id} was taken over by kernel pid "
                f"{self.taken_from[kernel]}: %dist_cluster attach {self.cluster.id} --force"
                " to take it back"
            )
        if self.holder != kernel:
            raise KeeperError(
                f"this kernel is not attached to cluster {self.cluster.id}: "
                f"%dist_cluster attach {self.cluster.id}"
            )

    def info(self) -> dict[str, Any]:
        cluster = self.cluster
        run = self._active_run()
        return {
            "id": cluster.id,
            "state": cluster.state.value,
            "failure": cluster.failure,
            "spec": spec_to_json(cluster.spec),
            "ranks": [r.to_dict() for r in cluster.ranks],
            "master_addr": cluster.master_addr,
            "pair_ports": cluster.pair_ports,
            "stack_dir": cluster.stack_dir,
            "start_seconds": cluster.start_seconds,
            "ready_since": cluster.ready_since,
            "holder": self.holder if _alive(self.holder) else None,
            "keeper": os.getpid(),
            "idle_timeout": self.idle_timeout,
            "idle_s": self.idle_seconds(),
            "run": None if run is None else {"id": run.id, "name": run.name, "ranks": run.ranks},
        }

    def op_info(self, kernel: int | None = None) -> dict[str, Any]:
        if kernel is not None:
            self._check_holder(kernel)
        return self.info()

    def op_attach(self, kernel: int, force: bool = False) -> dict[str, Any]:
        holder = self.holder
        if holder is not None and holder != kernel and _alive(holder) and not force:
            raise KeeperError(
                f"cluster {self.cluster.id} is attached to kernel pid {holder}: detach it "
                f"there (%dist_cluster detach), or %dist_cluster attach {self.cluster.id} "
                "--force to take it over"
            )
        if holder is not None and holder != kernel and _alive(holder):
            self.taken_from[holder] = kernel
        self.taken_from.pop(kernel, None)
        self.holder = kernel
        return self.info()

    def op_release(self, kernel: int) -> None:
        if self.holder == kernel:
            self.holder = None
            self.idle_since = time.monotonic()

    def op_stop(self, kernel: int) -> str:
        self._check_holder(kernel)
        return self.cluster.owner.stop("%dist_cluster stop")

    def op_interrupt(self, kernel: int) -> str:
        self._check_holder(kernel)
        return self.cluster.owner.interrupt()

    def op_restart(self, kernel: int, everything: bool = False) -> dict[str, Any]:
        self._check_holder(kernel)
        self.cluster.restart_sync(everything=everything)
        return self.info()

    def op_dead_ranks(self, kernel: int) -> dict[str, str]:
        self._check_holder(kernel)
        return {str(rank): why for rank, why in self.cluster.dead_ranks().items()}

    def op_run(self, kernel: int, spec: dict[str, Any]) -> dict[str, Any]:
        """Start a training run here, on a thread of ours: it goes on without the kernel."""
        from ..store.recorder import record
        from ..training import RunSpec, TrainingRun
        from .sink import END_EVENT, StoreOutputSink

        self._check_holder(kernel)
        run = TrainingRun(self.cluster, RunSpec(**spec), writer=self.cluster.writer())
        sink = StoreOutputSink(self.cluster.writer(), run.id)

        def go() -> None:
            hint = ""
            try:
                hint = run.run(sink=sink).hint
            except Exception as e:  # the run's own end is recorded; this is the keeper's log
                log.warning("run %s: %s", run.name, e)
            finally:
                sink.close()
                # After its end state: the following kernel waits for this (its hint).
                writer = self.cluster.writer()
                record(writer, "add_event", END_EVENT, hint, run_id=run.id)

        thread = threading.Thread(target=go, name=f"dist-train-{run.id}", daemon=True)
        thread.start()
        self.runs[run.id] = run
        self.run_threads.append(thread)
        return {"id": run.id, "name": run.name, "ranks": run.ranks}

    def op_keep(self, kernel: int, entry: dict[str, Any]) -> int:
        """Keep a %%dist cell, push or training the kernel ran on the ranks."""
        self._check_holder(kernel)
        return self.history.add(kernel, entry)

    def op_history(self, kernel: int) -> list[dict[str, Any]]:
        self._check_holder(kernel)
        return self.history.entries

    def op_stop_run(self, kernel: int, run_id: str) -> None:
        self._check_holder(kernel)
        run = self.runs.get(run_id)
        if run is not None and run.state in ACTIVE_RUN_STATES:
            run.stop()


def detached_note(idle_timeout: float | None) -> str:
    """The store event's message that marks this keeper's cluster detached (the panel's
    card shows it: GET clusters' ``detached``)."""
    note: DetachedModel = {"keeper": os.getpid(), "idle_timeout": idle_timeout}
    return json.dumps(note)


def _say(out: Any, message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def main() -> None:
    from ..cluster import forkserver
    from ..cluster.cluster import DistCluster
    from ..cluster.profiles import own_profile_dir
    from ..store import StoreError
    from ..store.location import store_path
    from ..store.reader import DETACHED_EVENT
    from ..store.recorder import record

    out = sys.stdout
    request = json.loads(sys.stdin.readline())
    spec = spec_from_json(request["spec"])
    idle = request.get("idle_timeout")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the kernel is not ours
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    cluster = DistCluster(spec, progress=lambda text: _say(out, {"progress": text}))
    try:
        profile = Path(own_profile_dir(cluster.id))
    except Exception as e:  # a refusal (unsafe folder): the kernel says it
        _say(out, {"error": str(e)})
        raise SystemExit(1) from None
    logfile = open(profile / "keeper.log", "a", buffering=1)  # noqa: SIM115 (our life long)
    os.chmod(logfile.name, 0o600)
    os.dup2(logfile.fileno(), 2)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    log.info("keeper %d for cluster %s, store %s", os.getpid(), cluster.id, store_path())
    forkserver.prestart()
    try:
        cluster.start_sync()
    except BaseException as e:
        _say(out, {"error": str(e) or type(e).__name__})
        raise SystemExit(1) from None
    keeper = Keeper(cluster, idle)
    signal.signal(signal.SIGTERM, lambda *_: keeper.request_stop())
    path = keeper.write_file()
    record(
        cluster.writer(),
        "add_event",
        DETACHED_EVENT,
        detached_note(idle),
        cluster_id=cluster.id,
    )
    cluster.progress = lambda text: log.info("%s", text)
    _say(out, {"ready": {"file": str(path), "id": cluster.id}})
    out.close()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    try:
        keeper.serve()
    finally:
        if cluster.state not in (ClusterState.STOPPED, ClusterState.NEW):
            cluster.owner.stop("the keeper ends")
        # A Stop from the panel: its answer, and every write of the stop, in the store
        # before this process (and the watcher's daemon thread with it) ends.
        cluster.owner.close()
        cluster.owner.join(timeout=5.0)
        for thread in keeper.run_threads:  # each run's end event, before the writer closes
            thread.join(timeout=5.0)
        writer = cluster.writer()
        if writer is not None:
            try:
                writer.close()
            except StoreError as e:
                log.warning("keeper: %s", e)
        forkserver.close()
        log.info("keeper %d ends", os.getpid())


if __name__ == "__main__":
    main()
