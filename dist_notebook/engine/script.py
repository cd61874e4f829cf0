"""Run a torchrun-style script on this rank, unchanged.

The script sees ``__name__ == "__main__"``, its own ``sys.argv``, its directory first on
``sys.path`` (as ``python script.py`` and torchrun give it), and the env that torchrun
would give it (RANK, WORLD_SIZE, MASTER_ADDR/PORT of a live store), so its own
``dist.init_process_group()`` works.

A script that fails on one rank while its peers wait for it, in a collective or in the
rendezvous of init_process_group(), would hold them until its group's timeout (torch's
default: 30 minutes). torchrun ends the other workers; here the failing rank shuts down
the connections its script opened and has rank 0 close the script's store, so the peers
fail within about a second and every rank's exit status comes back.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback

from . import group, pgrelease

# Shown when a script written for GPUs runs on CPU ranks (torch's own error names an
# internal function: "module 'torch._C' has no attribute '_cuda_setDevice'").
_CUDA_SIGNS = ("_cuda_setDevice", "Torch not compiled with CUDA", "No CUDA GPUs", "cuda")
NO_GPU_HINT = (
    "this script uses CUDA but the ranks have no GPU (CPU ranks, gloo): start GPU ranks "
    "with %dist_cluster start --gpus 0,1 (one GPU id per rank) on a machine with GPUs, "
    "or make the script fall back to the CPU"
)


def run_script(path: str, argv: list[str]) -> int:
    """Run *path* as ``__main__`` with ``sys.argv = [path, *argv]``; return its exit status."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    before = _connections()
    status = 1
    # The groups the script destroys are kept until its objects are gone (its DDP
    # models, freed as main() returns or with the script's namespace), then let go off
    # this thread: a group freed from a model's destructor could freeze the engine.
    with pgrelease.holding_groups():
        try:
            runpy.run_path(path, run_name="__main__")  # its namespace is freed here
            status = 0
        except SystemExit as e:
            status = _exit_status(e)
        except BaseException as e:
            traceback.print_exc()
            # As IPython keeps a failed cell's: %dist_debug then opens the script's frames.
            sys.last_type, sys.last_value, sys.last_traceback = type(e), e, e.__traceback__
            if _wants_cuda(e):
                print(NO_GPU_HINT, file=sys.stderr)
        finally:
            sys.argv = saved_argv
            sys.path[:] = saved_path
            if status != 0:
                release_peers(before)
            sys.stdout.flush()
            sys.stderr.flush()
    pgrelease.release()
    return status


def _exit_status(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _wants_cuda(e: BaseException) -> bool:
    import torch

    text = f"{type(e).__name__}: {e}"
    return not torch.cuda.is_available() and any(sign in text for sign in _CUDA_SIGNS)


def _connections() -> set[tuple[int, tuple[str, int]]]:
    """This process's established TCP connections: (fd, local address)."""
    import psutil

    return {
        (c.fd, tuple(c.laddr))
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_ESTABLISHED
    }  # type: ignore[misc]


def release_peers(before: set[tuple[int, tuple[str, int]]]) -> int:
    """After a failed script: free the peers that wait for this rank, and return how many
    connections were shut.

    - Peers blocked in a collective with it: every TCP connection the script opened
      (not those that existed before it, the engine's own) is shut down.
    - Peers waiting in the rendezvous for a rank that failed before joining it: the
      abort key makes rank 0 close the script's store (engine/group.py).
    """
    import torch.distributed as dist

    closed = group.shutdown_connections(lambda c: (c.fd, tuple(c.laddr)) not in before)
    group.abort_rendezvous(int(os.environ.get("RANK", "-1")))
    # After the shutdown: destroying a gloo group whose peer still waits could block.
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    return closed
