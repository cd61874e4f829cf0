"""The default process group of a rank: created, torn down and re-created on request.

These functions run on the engines (sent with ipyparallel's ``apply``). Rendezvous is
race-free: rank 0 binds a TCPStore on port 0 (the OS picks a free port) and the kernel
hands that port to the other ranks, so no port is ever guessed in advance. The env
variables are then set the way torchrun sets them (``TORCHELASTIC_USE_AGENT_STORE``),
so a script's own ``dist.init_process_group()`` joins the store as a client.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .. import envvars
from . import pgrelease

# The store object must outlive the group that uses it (NCCL exchanges its unique id
# through the store at the first collective), so rank 0 keeps the latest one here.
# _store_serial counts the stores hosted, so a guard knows when its store was replaced.
_master_store: Any = None
_store_serial = 0
_store_lock = threading.Lock()


def rank_info() -> dict[str, Any]:
    """This engine's identity, read from the rank environment set at boot."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    wants_gpu = bool(os.environ.get(envvars.DEVICES))
    return {
        "rank": int(os.environ.get("RANK", "-1")),
        "local_rank": int(os.environ.get("LOCAL_RANK", "-1")),
        "world_size": int(os.environ.get("WORLD_SIZE", "0")),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": f"cuda:{visible}" if wants_gpu and visible else "cpu",
        "threads": os.environ.get("OMP_NUM_THREADS"),
    }


def load_torch() -> str:
    """Import torch.distributed here (the engine's background import may still run)."""
    import torch
    import torch.distributed  # noqa: F401

    return str(torch.__version__)


def host_store(addr: str, timeout_s: float) -> int:
    """On rank 0: start a fresh TCPStore server on a free port and return that port."""
    global _master_store, _store_serial
    from torch.distributed import TCPStore

    # TCPStore alone listens on every interface; a socket bound to the cluster's
    # address (loopback by default) and handed over keeps it there.
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((addr, 0))
        sock.listen(128)
        store = TCPStore(
            addr,
            sock.getsockname()[1],
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=timeout_s),
            master_listen_fd=sock.fileno(),
        )
    except BaseException:
        sock.close()
        raise
    # The store owns the descriptor from here on and closes it when it is destroyed,
    # which may be long after this function's next call (a DDP model keeps its group,
    # and so its store, alive). Closed by us as well, that number would be closed twice:
    # the second time under whatever reused it (a gloo pair, the next store's
    # connection), killing it (a hung rendezvous, or SIGABRT in gloo's loop).
    sock.detach()
    with _store_lock:
        _master_store = store
        _store_serial += 1
    return int(store.port)


def destroy_group() -> bool:
    """Tear the default group down if there is one; return whether there was."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        # A DDP model of a cell may still hold the group: its last reference stays a
        # Python one, dropped off this thread (engine/pgrelease.py says why).
        pgrelease.keep(pgrelease.live_groups())
        dist.destroy_process_group()
        pgrelease.release()
        return True
    _reset_group_names()
    return False


def _reset_group_names() -> None:
    """Make the next group this rank creates be named as on a fresh rank.

    torch names each new group by a per-process counter (its store keys carry that
    name), and resets it only when a default group is destroyed. A creation that
    failed (a script's init_process_group() whose rendezvous was aborted, a group
    creation that timed out) advances it with no group to destroy: that rank's next
    group would then wait under another name than its peers' (a replaced rank starts
    at 0), until the timeout ("wait timeout ... keys: .../0//cpu//0/1").
    """
    from .. import privates

    privates.reset_group_count()


def export_rendezvous(addr: str, port: int) -> None:
    """Set the env a torchrun-style script reads to join the live store as a client."""
    os.environ["MASTER_ADDR"] = addr
    os.environ["MASTER_PORT"] = str(port)
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"


def init_group(addr: str, port: int, backend: str, timeout_s: float, generation: int) -> dict:
    """Create the default process group on this rank and prove it with one all_reduce."""
    import torch
    import torch.distributed as dist

    destroy_group()
    if backend == "gloo":
        bind_gloo_to(addr)
    listening_before = _listening_ports()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    timeout = timedelta(seconds=timeout_s)
    if rank == 0 and _master_store is not None and _master_store.port == port:
        store = _master_store
    else:
        store = dist.TCPStore(addr, port, is_master=False, timeout=timeout)
    device = torch.device("cpu")
    if backend == "nccl":
        # Each engine sees exactly one GPU (CUDA_VISIBLE_DEVICES was set at boot).
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    # A prefix per generation keeps a re-created group from reading the old one's keys.
    prefixed = dist.PrefixStore(f"dist-notebook/{generation}", store)
    dist.init_process_group(
        backend,
        store=prefixed,
        rank=rank,
        world_size=world,
        timeout=timeout,
        device_id=device if backend == "nccl" else None,
    )
    export_rendezvous(addr, port)
    probe = torch.ones(1, device=device)
    dist.all_reduce(probe)
    if int(probe.item()) != world:
        raise RuntimeError(
            f"process group check failed: all_reduce gave {probe.item()}, not {world}"
        )
    _publish_names(rank, world, device)
    _freeze_start_up_objects()
    _warm_after_start()
    # The ports this group's transport listens on (gloo's pairs), for sever() later.
    ports = sorted(_listening_ports() - listening_before)
    return {"rank": rank, "backend": dist.get_backend(), "device": str(device), "ports": ports}


_warmed = False
_frozen = False


def _freeze_start_up_objects() -> None:
    """Move what the engine's start made (torch, ipyparallel, IPython: ~300,000 objects)
    out of the cyclic garbage collector's sight, once, before the user's first cell.

    They live as long as the engine, yet every full collection walked them: in the first
    training loop of a fresh engine the collector took 0.36 s of 17.6 s (2%), measured.
    The user's objects, made later, are collected as usual.
    """
    global _frozen
    if not _frozen:
        _frozen = True
        import gc

        gc.freeze()


def _warm_after_start() -> None:
    """Import, off the start's critical path, what the first training cell would wait for.

    DDP's constructor imports torch._dynamo (~800 modules: 1-2 s on a quiet 2-core host,
    10 s under load), which made the first %%dist_train of a kernel 5 s slower than the
    next ones; %dist_pull's cloudpickle likewise. A background thread does it once, after
    the group exists, while the user reads the start's output.
    """
    global _warmed
    if _warmed:
        return
    _warmed = True

    def warm() -> None:
        import cloudpickle  # noqa: F401
        import torch.nn.parallel  # noqa: F401

        from .. import privates

        privates.import_dynamo()

    import threading

    threading.Thread(target=warm, name="dist-notebook-warm", daemon=True).start()


def bind_gloo_to(addr: str) -> str | None:
    """Make gloo listen on the interface that holds *addr* (the cluster's address).

    Left alone, gloo listens on the address this host's name resolves to: on most cloud
    machines the LAN, where anyone could connect to the ranks' unauthenticated
    transport. A GLOO_SOCKET_IFNAME the user set is kept; an address that is not on
    this host (a rank of another node joining rank 0) leaves gloo's own choice.
    Returns the interface chosen, or None.
    """
    import psutil

    if os.environ.get("GLOO_SOCKET_IFNAME") and not os.environ.get(envvars.GLOO_IFNAME):
        return None  # the user's own choice
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == addr for a in addresses):
            # Read by gloo (C++ getenv) when the group's device is created.
            os.environ["GLOO_SOCKET_IFNAME"] = os.environ[envvars.GLOO_IFNAME] = name
            return name
    return None


def _listening_ports() -> set[int]:
    import psutil

    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def shutdown_connections(which: Callable[[Any], bool]) -> int:
    """Shut down (both ways) this process's established TCP connections for which
    *which(conn)* is true (a psutil connection); return how many were shut.

    A peer blocked on such a connection (a gloo collective, a store wait) then fails at
    once with "connection closed" instead of waiting for its timeout. The socket is
    shut down through a duplicate of its descriptor: its owner (gloo, the store) closes
    its own descriptor later, as after any peer's disconnect.
    """
    import psutil

    closed = 0
    for conn in psutil.Process().net_connections(kind="tcp"):
        if conn.status != psutil.CONN_ESTABLISHED or conn.fd < 0 or not which(conn):
            continue
        try:
            sock = socket.socket(fileno=os.dup(conn.fd))
        except OSError:
            continue  # its owner closed it since the listing
        try:
            sock.shutdown(socket.SHUT_RDWR)
            closed += 1
        except OSError:
            continue  # already closed by the peer
        finally:
            sock.close()
    return closed


def sever(pair_ports: list[int]) -> int:
    """Shut down this rank's connections to its peers' group transport; return how many.

    A peer blocked in a gloo collective with this (idle) rank then fails at once with
    "connection closed" instead of waiting for the group's timeout. Destroying the group
    is not enough when a DDP model still holds it: its sockets stay open. Only TCP
    connections to or from the group's own listening ports are touched.
    """
    ports = set(pair_ports)
    closed = shutdown_connections(
        lambda c: bool(c.raddr) and (c.laddr.port in ports or c.raddr.port in ports)
    )
    destroy_group()
    return closed


# --- a script's rendezvous (%dist_run) -------------------------------------------------
# A rank whose script fails before its init_process_group() never joins the rendezvous:
# its peers would wait in it for the group's timeout (torch's default: 30 minutes), and
# neither SIGINT nor anything sent to their busy engine frees them. So, for a script's
# run, rank 0 (which hosts the store) keeps a guard thread that waits for ABORT_KEY;
# a failing rank sets it, and the guard closes the store: every rank waiting in the
# rendezvous (or on any store call) then fails at once with "connection closed".
ABORT_KEY = "dist-notebook/abort"
_GUARD_PERIOD = 0.1  # seconds between the guard's looks at the store


def guard_rendezvous(addr: str, port: int) -> None:
    """On rank 0, right after host_store(): once a rank sets ABORT_KEY, shut down every
    connection to this store, and keep doing so (a rank that comes late to the
    rendezvous fails at once too) until the next host_store() replaces the store."""
    import psutil
    from torch.distributed import TCPStore

    serial = _store_serial
    client = TCPStore(addr, port, is_master=False, timeout=timedelta(seconds=30))

    def current() -> bool:
        return _store_serial == serial

    def guard() -> None:
        while current():
            try:
                if client.check([ABORT_KEY]):
                    break
            except RuntimeError:  # the store is gone: this script's run is over
                return
            time.sleep(_GUARD_PERIOD)
        while current():
            try:
                shutdown_connections(
                    lambda c: c.laddr.port == port or (bool(c.raddr) and c.raddr.port == port)
                )
            except (OSError, psutil.Error) as e:  # a connection going as we look: again
                print(f"dist-notebook: closing the script's store: {e}", file=sys.stderr)
            time.sleep(_GUARD_PERIOD)

    threading.Thread(target=guard, name="dist-notebook-rendezvous-guard", daemon=True).start()


def abort_rendezvous(rank: int, timeout_s: float = 5.0) -> bool:
    """From a rank whose script failed: set ABORT_KEY in the script's store (MASTER_ADDR,
    MASTER_PORT), so rank 0's guard frees the peers waiting on it. Return whether it
    was set (False: the store is gone already, or this is not a script's run)."""
    from torch.distributed import TCPStore

    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return False
    try:
        store = TCPStore(addr, int(port), is_master=False, timeout=timedelta(seconds=timeout_s))
        store.set(ABORT_KEY, str(rank))
    except RuntimeError:  # the store was closed already (another rank aborted first)
        return False
    return True


def _publish_names(rank: int, world: int, device: Any) -> None:
    """Put the names every cell expects into the engine's interactive namespace."""
    import torch
    import torch.distributed as dist
    from IPython import get_ipython

    from .checkpoint import checkpointer
    from .reporter import report

    shell = get_ipython()
    if shell is None:
        return
    shell.user_ns.update(
        torch=torch,
        dist=dist,
        rank=rank,
        world_size=world,
        local_rank=int(os.environ.get("LOCAL_RANK", rank)),
        device=device,
        report=report,
        checkpointer=checkpointer,
    )
