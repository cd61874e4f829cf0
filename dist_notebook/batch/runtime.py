"""What a script written by ``%dist_export`` calls on each rank, under torchrun.

Runbook (the script's own docstring repeats it with its name)::

    torchrun --standalone --nproc-per-node 2 train.py        # one machine
    sbatch train.sbatch                                       # Slurm: srun + torchrun

``setup()`` does on each rank what the notebook's cluster did on its engines: threads
(``OMP_NUM_THREADS`` before torch loads: the host's cores over its ranks, or the
cluster's ``--threads``), one device per rank (a GPU per local rank, or none visible for
CPU ranks), gloo bound to the rendezvous address's interface, the default process group
with the cluster's backend and timeout, and the names every cell finds on a rank
(``rank``, ``world_size``, ``local_rank``, ``device``). The cluster seeds nothing on its
ranks: the cells' own seeds (``torch.manual_seed`` ...) carry over as they are.

``job.run(...)`` wraps the training cell and records it in the run store, as a
``%%dist_train`` run is, so it shows in ``%dist_runs`` and the side panel beside the
notebook's runs. How records get there, with no kernel: rank 0 hosts the very collector a
kernel does (``training/collector.py``: a ZMQ PULL socket, HMAC-checked, batched writes)
and is the only process that opens the store; every rank's ``report()`` is the
notebook's (``engine/reporter.py``), pointed at rank 0's collector by the endpoint and key
rank 0 broadcasts over the process group. Chosen over the alternatives because:

- each rank appending through its own ``StoreWriter`` would make N SQLite writers on one
  file, on a shared file system across nodes where SQLite's locking is least reliable;
- rank 0 gathering records with a collective would add a barrier to every report (and
  hang with a dead peer); ``report()`` here stays the notebook's: a deque append, never
  a wait on another rank;
- the records, their fields (step time, comm time, GPU) and the run's states are then
  exactly the notebook's, written by the same code.

Each rank's outcome (done, failed with its error, cancelled by SIGTERM from ``scancel`` or
from torchrun ending the job) goes through torchrun's own rendezvous store; rank 0 writes
the run's end from them, bounded by ``END_WAIT_S``. A job killed with SIGKILL cannot record
its end: its run stays ``running`` until its cluster row (``batch-...``) is pruned.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import socket
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

# How long rank 0 waits for the others' last records and outcomes after the training.


class Cancelled(KeyboardInterrupt):
    """SIGTERM (scancel, or torchrun ending the job after another rank failed)."""


def _need(name: str) -> str:
    value = os.environ.get(name)
    if value is None:
        raise SystemExit(
            f"{name} is not set: run this script with torchrun, e.g. "
            f"torchrun --standalone --nproc-per-node 2 {os.path.basename(sys.argv[0])}"
        )
    return value


def _rank_environment(gpus: bool, threads: int | None) -> tuple[int, int, int, int]:
    """Threads and device visibility, before torch loads; (rank, world, local, local world)."""
    rank, world = int(_need("RANK")), int(_need("WORLD_SIZE"))
    local = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    # As the cluster's engines (engine/rankenv.py): cores over this host's ranks, not
    # torchrun's default of 1, unless the notebook's cluster gave --threads.
    count = threads or max(1, (os.cpu_count() or 1) // max(1, local_world))
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(count)
    if gpus:
        # One GPU per rank, seen as cuda:0, as each engine saw its own.
        given = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ids = given.split(",") if given else [str(i) for i in range(local_world)]
        os.environ["CUDA_VISIBLE_DEVICES"] = ids[local % len(ids)]
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU ranks never grab a visible GPU
    return rank, world, local, local_world


class Job:
    """One rank of the exported job: its identity, and ``run()`` for the training cell."""

    def __init__(
        self, rank: int, world_size: int, local_rank: int, local_world: int, device: Any
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.local_world = local_world
        self.device = device
        self.backend = ""
        self._values: dict[str, Any] | None = None
        self._values_path: Path | None = None

    def pushed(self, name: str) -> Any:
        """A value the notebook pushed to the ranks (%dist_push), saved beside the script."""
        if self._values is None:
            if self._values_path is None:
                raise RuntimeError(f"no pushed values were exported with this script ({name})")
            import pickle

            _check_own(self._values_path)
            with open(self._values_path, "rb") as f:
                self._values = pickle.load(f)  # the user's own file, written owner-only
        return self._values[name]

    def run(self, **options: Any) -> Any:
        # Here, not at the top: the recorder loads torch, which setup() must precede.
        from .record import BatchRun

        return BatchRun(self, **options)


def _check_own(path: Path) -> None:
    """Unpickling runs code: only a file of this user's, that no one else can write."""
    import stat

    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise SystemExit(
            f"{path} is a link, not yours, or writable by others: not loaded; export the"
            " script again (%dist_export ... --force)"
        )


def setup(
    *,
    backend: str,
    timeout_s: float,
    gpus: bool = False,
    threads: int | None = None,
    values: str | None = None,
) -> Job:
    """The notebook's rank set-up on this torchrun worker; call before importing torch."""
    rank, world, local, local_world = _rank_environment(gpus, threads)
    import torch
    import torch.distributed as dist

    from ..engine.group import bind_gloo_to

    device = torch.device("cpu")
    if backend == "gloo":
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        try:
            bind_gloo_to(socket.gethostbyname(addr))
        except OSError:
            pass  # an unresolvable name: gloo's own choice, as torchrun alone would
    if gpus:
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        timeout=timedelta(seconds=timeout_s),
        device_id=device if backend == "nccl" else None,
    )
    _install_sigterm()
    # As the engines do after their start (engine/group.py): what the imports made
    # stays out of the cyclic collector's sight.
    gc.freeze()
    job = Job(rank, world, local, local_world, device)
    job.backend = backend
    if values:
        main = getattr(sys.modules.get("__main__"), "__file__", None) or sys.argv[0]
        job._values_path = Path(os.path.abspath(main)).with_name(values)
    atexit.register(_destroy_group)
    return job


def _destroy_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _install_sigterm() -> None:
    def cancel(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the rank
        raise Cancelled(f"signal {signum} (the job was cancelled)")

    signal.signal(signal.SIGTERM, cancel)


__all__ = ["Cancelled", "Job", "setup"]
