"""The training cell of an exported job as a run in the run store (``job.run(...)``).

Rank 0 records the job as a cluster (``batch-...``, its ranks with host, pid and device)
and the run (pending, running, then succeeded, failed or cancelled, each rank's state),
and hosts the collector that stores every rank's ``report()``: the same collector, store
writer and exporters (``--tensorboard``, ``--mlflow``) as a notebook's run. The states
move through the same checked doors as a notebook's cluster and run (``jobfacts.py``).
Why rank 0 alone writes, and how the others' records and outcomes reach it: ``runtime.py``.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..engine import training as engine_training
from ..metrics import RunMetrics
from ..protocol import Record
from ..store.recorder import record
from . import outcomes
from .control import owner_pid, watch
from .jobfacts import JobFacts

if TYPE_CHECKING:
    from . import runtime


class _Unkept(RunMetrics):
    """The collector's in-memory series, kept empty: a batch job has no live view, and a
    long job's full history would only grow rank 0's memory."""

    def add(self, records: list[Record]) -> None:
        self.count += len(records)


def _collector_ip(job: runtime.Job) -> str:
    """Where rank 0's collector listens: loopback when every rank is on its host, else
    its address towards the rendezvous host (records are signed with the run's key)."""
    if job.local_world == job.world_size:
        return "127.0.0.1"
    from ..engine.rankenv import _route_to

    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        address, _ = _route_to(socket.gethostbyname(master))
    except OSError:
        address = socket.gethostbyname(socket.gethostname())
    return address


def _rank_info(job: runtime.Job) -> dict[str, Any]:
    return {
        "rank": job.rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": str(job.device),
        "node_rank": int(os.environ.get("GROUP_RANK", "0") or 0),
        "state": "busy",
    }


class BatchRun:
    """``with job.run(name=..., steps=...):`` around the training cell's code."""

    def __init__(
        self,
        job: runtime.Job,
        *,
        name: str,
        steps: int | None = None,
        checkpoint_every: int | None = None,
        checkpoint_dir: str | None = None,
        resume: bool = False,
        tensorboard: str | None = None,
        mlflow: bool = False,
    ) -> None:
        self.job = job
        self.name = name
        self.steps = steps
        self.checkpoints = {
            "every": checkpoint_every,
            "directory": os.path.abspath(checkpoint_dir or os.path.join("checkpoints", name))
            if (checkpoint_every or resume or checkpoint_dir)
            else None,
            "resume": resume,
        }
        self.tensorboard = tensorboard
        self.mlflow = mlflow
        self.cluster_id, self.run_id = outcomes.new_ids()
        self.writer: Any = None
        self.facts: JobFacts | None = None  # the cluster's and the run's doors (rank 0)
        self.watching: Any = None  # the panel's Stop, on one host (control.py)
        self.collector: Any = None
        self.exports: Any = None
        self.ranks = list(range(job.world_size))
        self.started = time.time()

    # --- rank 0: the store ----------------------------------------------------------
    def _open_store(self, infos: list[dict[str, Any]]) -> tuple[str, bytes]:
        from ..export import FLAGS_EVENT, LiveExports, RunInfo
        from ..store import StoreError, StoreWriter
        from ..training.collector import Collector

        try:
            self.writer = StoreWriter()
        except StoreError as e:  # the job trains on; its records are not kept
            print(f"dist-notebook: the run is not recorded: {e}", file=sys.stderr)
        w = self.writer
        facts = self.facts = JobFacts(
            w, self.cluster_id, self.run_id, self.job.world_size, self.job.backend
        )
        # rank 0 on one host (control.py says why and when), else no owner
        facts.started(infos, owner_pid(self.job.local_world, self.job.world_size))
        script = _script_text()
        record(
            w,
            "add_run",
            self.run_id,
            name=self.name,
            cluster_id=self.cluster_id,
            ranks=self.ranks,
            steps=self.steps,
            code=script,
        )
        flags = {"name": self.name, "steps": self.steps, "batch": " ".join(sys.argv)}
        record(w, "add_event", FLAGS_EVENT, json.dumps(flags), run_id=self.run_id)
        record(w, "add_event", "command", _command(), run_id=self.run_id)
        atexit.register(self._cluster_ended)
        if owner_pid(self.job.local_world, self.job.world_size) and self.writer is not None:
            self.watching = watch(self.cluster_id, str(self.writer.path))
        info = RunInfo(
            run_id=self.run_id,
            name=self.name,
            code=script,
            flags=flags,
            ranks=tuple(self.ranks),
            world_size=self.job.world_size,
            backend=self.job.backend,
            cluster_id=self.cluster_id,
            started=time.time(),
        )
        self.exports = LiveExports(info, self.tensorboard, self.mlflow)
        key = os.urandom(32)
        self.collector = Collector(
            self.run_id,
            key,
            _Unkept(self.ranks),
            self.writer,
            ip=_collector_ip(self.job),
            sinks=self.exports.sinks,
        )
        facts.running()
        return self.collector.endpoint, key

    def _cluster_ended(self) -> None:
        if self.watching is not None:
            self.watching.set()
        if self.facts is not None:
            self.facts.stopped()
        if self.writer is not None:
            self.writer.close()

    def _conclude(self, own: tuple[str, str | None]) -> None:
        """On rank 0: every rank's last records and outcome, then the run's end."""
        others = [r for r in self.ranks if r != 0]
        found = outcomes.get_outcomes(self.run_id, others, outcomes.END_WAIT_S)
        found[0] = own
        self.collector.wait_for_ends(set(self.ranks), timeout=outcomes.END_WAIT_S)
        self.collector.close()
        states = _released({r: found.get(r, ("cancelled", None)) for r in self.ranks})
        failed = {r: e for r, (s, e) in states.items() if s == "failed"}
        if failed:
            state = "failed"
            error = "; ".join(f"rank {r}: {e}" for r, e in sorted(failed.items()))
        elif any(s == "cancelled" for s, _ in states.values()):
            state, error = "cancelled", None
        else:
            state, error = "succeeded", None
        self.exports.close(state, error)
        if self.facts is not None:
            self.facts.ended(state, error, states)
        took = time.time() - self.started
        print(
            f"run {self.name} ({self.run_id}) {state} in {took:.1f} s;"
            f" {self.collector.received} records in the run store (cluster {self.cluster_id})",
            flush=True,
        )

    # --- every rank -----------------------------------------------------------------
    def __enter__(self) -> BatchRun:
        import torch.distributed as dist

        infos: list[Any] = [None] * self.job.world_size
        dist.all_gather_object(infos, _rank_info(self.job))
        shared: list[Any] = [None, None, None, None]
        failure: BaseException | None = None
        if self.job.rank == 0:
            try:
                endpoint, key = self._open_store(infos)
                shared = [endpoint, key, self.run_id, self.cluster_id]
            except Exception as e:  # the others must not wait for the group's timeout
                failure = e
        dist.broadcast_object_list(shared, src=0)
        if failure is not None:
            raise failure
        endpoint, key, self.run_id, self.cluster_id = shared
        if endpoint is None:
            raise RuntimeError("rank 0 could not start the run's recording: see its error")
        engine_training.begin_run(endpoint, key, self.run_id, self.checkpoints)
        self.started = time.time()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # A SIGTERM now must not break the recording of the end: it waits until after.
        import signal

        held = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            engine_training.end_run()  # the last message carries the end mark
            own = outcomes.outcome(exc)
            if self.job.rank == 0:
                self._conclude(own)
            else:
                outcomes.put_outcome(self.run_id, self.job.rank, *own)
        finally:
            signal.signal(signal.SIGTERM, held)


# What a rank's collective raises when a peer went away (gloo's words; NCCL's watchdog).
_PEER_LOST = ("connection closed by peer", "connection reset by peer", "remote worker")


def _released(states: dict[int, tuple[str, Any]]) -> dict[int, tuple[str, Any]]:
    """Ranks that failed only because another rank failed first (their collective lost
    its peer, or torchrun's SIGTERM cancelled them) are ``released``, as in a notebook's
    run; the run's error then names the ranks that failed by themselves."""

    def lost(error: Any) -> bool:
        return any(words in str(error).lower() for words in _PEER_LOST)

    first = [r for r, (s, e) in states.items() if s == "failed" and not lost(e)]
    if not first:
        return states
    return {
        r: ("released", e) if r not in first and s in ("failed", "cancelled") else (s, e)
        for r, (s, e) in states.items()
    }


def _script_text() -> str:
    main = getattr(sys.modules.get("__main__"), "__file__", None) or sys.argv[0]
    try:
        with open(main, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def _command() -> str:
    job = os.environ.get("SLURM_JOB_ID")
    where = f"Slurm job {job}" if job else f"torchrun on {socket.gethostname()}"
    return f"{where}: {' '.join(sys.argv)}"
