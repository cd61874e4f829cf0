"""Run a torchrun-style script on this rank, unchanged.

The script sees ``__name__ == "__main__"``, its own ``sys.argv``, its directory first on
``sys.path`` (as ``python script.py`` and torchrun give it), and the env that torchrun
would give it (RANK, WORLD_SIZE, MASTER_ADDR/PORT of a live store), so its own
``dist.init_process_group()`` works.

A script that fails on one rank while its peers wait for it in a collective would hold
them until its group's timeout (torch's default: 30 minutes). torchrun ends the other
workers; here the failing rank shuts down the connections its script opened, so the
peers fail within about a second and every rank's exit status comes back.
"""

from __future__ import annotations

import os
import runpy
import socket
import sys
import traceback

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
    try:
        runpy.run_path(path, run_name="__main__")
        status = 0
    except SystemExit as e:
        status = _exit_status(e)
    except BaseException as e:
        traceback.print_exc()
        if _wants_cuda(e):
            print(NO_GPU_HINT, file=sys.stderr)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if status != 0:
            release_peers(before)
        sys.stdout.flush()
        sys.stderr.flush()
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
    """After a failed script: tear down its process group and shut down every TCP
    connection it opened (not those that existed before it, the engine's own), so peers
    blocked in a collective with this rank fail at once. Return how many were shut."""
    import psutil
    import torch.distributed as dist

    closed = 0
    for conn in psutil.Process().net_connections(kind="tcp"):
        if conn.status != psutil.CONN_ESTABLISHED or conn.fd < 0:
            continue
        if (conn.fd, tuple(conn.laddr)) in before:
            continue
        sock = socket.socket(fileno=os.dup(conn.fd))
        try:
            sock.shutdown(socket.SHUT_RDWR)
            closed += 1
        except OSError:
            continue  # already closed by the peer
        finally:
            sock.close()
    # After the shutdown: destroying a gloo group whose peer still waits could block.
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    return closed
