"""Each rank's outcome of a batch job, through torchrun's rendezvous store.

A rank puts its run-rank state (done, failed with its error, cancelled) under a key of
the run; rank 0 gets them all, bounded by ``END_WAIT_S``, and writes the run's end.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import timedelta
from typing import Any

END_WAIT_S = 10.0
_STATE_KEY = "dist-notebook/batch/{run}/{rank}"


def outcome(exc: BaseException | None) -> tuple[str, str | None]:
    """(run-rank state, error) of a rank whose training cell ended with *exc*."""
    if exc is None:
        return "done", None
    if isinstance(exc, KeyboardInterrupt):
        return "cancelled", None
    return "failed", f"{type(exc).__name__}: {exc}"


def agent_store(timeout_s: float) -> Any:
    """torchrun's rendezvous store, as a client (None when it cannot be reached)."""
    from torch.distributed import TCPStore

    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        return None
    try:
        return TCPStore(addr, int(port), is_master=False, timeout=timedelta(seconds=timeout_s))
    except (RuntimeError, ValueError, OSError):
        return None


def put_outcome(run_id: str, rank: int, state: str, error: str | None) -> None:
    store = agent_store(END_WAIT_S)
    if store is None:
        return
    try:
        store.set(_STATE_KEY.format(run=run_id, rank=rank), json.dumps([state, error]))
    except (RuntimeError, OSError):
        pass  # the store is gone (torchrun is ending the job): rank 0 says "cancelled"


def get_outcomes(run_id: str, ranks: list[int], wait_s: float) -> dict[int, tuple[str, Any]]:
    """The outcomes the *ranks* put, waiting up to *wait_s* in all; missing ones absent."""
    store = agent_store(wait_s)
    found: dict[int, tuple[str, Any]] = {}
    if store is None:
        return found
    deadline = time.monotonic() + wait_s
    for rank in ranks:
        key = _STATE_KEY.format(run=run_id, rank=rank)
        left = max(0.05, deadline - time.monotonic())
        try:
            store.wait([key], timedelta(seconds=left))
            state, error = json.loads(store.get(key))
        except (RuntimeError, OSError, ValueError):
            continue
        found[rank] = (state, error)
    return found


def new_ids() -> tuple[str, str]:
    """(cluster id, run id) of this job in the store; the cluster's names the job."""
    job = os.environ.get("SLURM_JOB_ID")
    tag = f"slurm{job}-" if job else ""
    return f"batch-{tag}{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:12]
