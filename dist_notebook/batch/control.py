"""The panel's Stop and Interrupt for a batch job on one machine.

A job whose ranks all run on the host that reads the store (``torchrun --standalone``,
not a Slurm job) records rank 0's pid as its cluster's owner: a reader there then knows
when the job died without recording its end (SIGKILL, OOM) and shows its run orphaned, and
the Jupyter server sends the panel's Stop or Interrupt through the control queue
(store/control.py) as to a kernel. Rank 0's watcher thread takes the request, answers
it, and sends SIGTERM to torchrun's agent (rank 0's parent), which passes it to every
rank: each rank's training then ends ``cancelled`` (runtime.py) and rank 0 records the
run so. Interrupt does the same: a batch job has no cell to interrupt but its run.

On several nodes (or under Slurm) the job records no owner pid: a pid read on another
host would be judged dead by a reader here; ``scancel`` stops such a job.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import psutil

POLL_S = 0.2  # as a kernel's owner watcher (cluster/owner.py)


def owner_pid(local_world: int, world_size: int) -> int:
    """Rank 0's pid when the whole job runs on this host under torchrun, else 0."""
    if local_world != world_size or os.environ.get("SLURM_JOB_ID"):
        return 0
    return os.getpid() if _agent() is not None else 0


def _agent() -> psutil.Process | None:
    """torchrun's agent: this worker's parent, when it is one."""
    if not os.environ.get("TORCHELASTIC_RUN_ID"):
        return None
    try:
        parent = psutil.Process(os.getppid())
        command = " ".join(parent.cmdline())
    except psutil.Error:
        return None
    return parent if "torchrun" in command or "torch.distributed.run" in command else None


def watch(cluster_id: str, store_path: str) -> threading.Event:
    """Take the panel's requests for *cluster_id* until the returned event is set."""
    done = threading.Event()

    def loop() -> None:
        from pathlib import Path

        from ..store.control import ControlQueue

        queue = ControlQueue(Path(store_path))
        try:
            while not done.wait(POLL_S):
                for seq, action in queue.take(cluster_id):
                    queue.finish(seq, f"{action}: the batch job's run is cancelled")
                    _cancel_job()
        except Exception as e:  # the store went away: the job trains on, unstoppable here
            print(f"dist-notebook: the panel cannot stop this job: {e}", file=sys.stderr)
        finally:
            queue.close()

    threading.Thread(target=loop, name="dist-notebook-batch-control", daemon=True).start()
    return done


def _cancel_job() -> None:
    agent = _agent()
    if agent is not None:
        agent.send_signal(signal.SIGTERM)  # torchrun passes it to every rank
    else:
        signal.raise_signal(signal.SIGTERM)
