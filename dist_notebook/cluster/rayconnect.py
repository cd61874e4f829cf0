"""Connecting this process to a Ray cluster, as ``ray.init()`` does, with our errors.

The address comes from ``--address``, else ``RAY_ADDRESS``, else a Ray cluster running
on this machine (``address="auto"``); none of these starts a new Ray instance. Every
failure is one line naming the fix (``RayConnectError``).

A Ray cluster on loopback (``ray start --head --node-ip-address 127.0.0.1``): Ray turns
127.0.0.1 into the machine's own address, in ``ray start`` and in the driver alike,
unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set before Ray is imported (it then
keeps loopback, a one-machine cluster). We set it for a loopback address only, and
only before Ray is imported here.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from .. import privates

LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
NAMESPACE = "dist_notebook"
RECONNECT_VAR = "RAY_gcs_rpc_server_reconnect_timeout_s"
KERNEL_RECONNECT_S = 10 * 365 * 24 * 3600
START_HINT = "ray start --head --num-cpus N --node-ip-address 127.0.0.1"
# How long the GCS may take to accept a connection before we say it does not answer:
# with the kernel's reconnect rule (above) ray.init() would otherwise dial it for good.
ANSWER_TIMEOUT_S = 5.0


class RayConnectError(RuntimeError):
    """No Ray cluster could be reached; the message says how to get one."""


def chosen_address(address: str = "") -> str:
    """The address to connect to: *address*, else ``RAY_ADDRESS``, else "auto"."""
    return address or os.environ.get("RAY_ADDRESS", "") or "auto"


def _is_loopback(address: str) -> bool:
    host = address.removeprefix("ray://").rpartition(":")[0] or address
    return host in ("localhost", "::1", "[::1]") or host.startswith("127.")


def import_ray() -> Any:
    """The ``ray`` module, or a RayConnectError naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise RayConnectError(
            "--launcher ray needs Ray: pip install 'dist-notebook[ray]'"
        ) from None
    return ray


def connect(address: str = "") -> Any:
    """Connect this process to the Ray cluster at *address* (see the module); return
    the ``ray`` module. Already connected: that connection is kept."""
    target = chosen_address(address)
    import sys

    if _is_loopback(target) and "ray" not in sys.modules:
        os.environ.setdefault(LOOPBACK_VAR, "0")
    # Ray ends a driver's process once its cluster's GCS is unreachable for 60 s: a
    # batch driver's rule, not a kernel's, which must outlive a lost Ray cluster (its
    # ranks are then marked dead, and stop gives up on Ray: rayengines.launcher).
    os.environ.setdefault(RECONNECT_VAR, str(KERNEL_RECONNECT_S))
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if not target.startswith("ray://"):  # (Ray Client dials a server of its own)
        _check_answers(target)
    try:
        ray.init(
            address=target,
            namespace=NAMESPACE,
            log_to_driver=False,
            configure_logging=False,
        )
    except ConnectionError as e:
        raise _no_cluster(target, e) from None
    return ray


def _no_cluster(target: str, error: ConnectionError) -> RayConnectError:
    where = (
        "no Ray cluster is running here and neither --address nor RAY_ADDRESS names one"
        if target == "auto"
        else f"no Ray cluster answers at {target} ({str(error).splitlines()[0][:160]})"
    )
    return RayConnectError(f"{where}: start one with `{START_HINT}`, or pass --address HOST:PORT")


def _check_answers(target: str) -> None:
    """Raise a RayConnectError unless the GCS that ray.init() will dial for *target*
    accepts a TCP connection within ANSWER_TIMEOUT_S (a cluster file left by a head that
    is gone, or a head on loopback this process would reach at the machine's address)."""
    try:
        gcs = privates.ray_bootstrap_address(target)
    except ConnectionError as e:
        raise _no_cluster(target, e) from None
    except ValueError as e:
        raise RayConnectError(
            f"{target!r} is not a Ray address ({e}): pass --address HOST:PORT"
        ) from None
    host, _, port = gcs.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), ANSWER_TIMEOUT_S).close()
    except (OSError, ValueError) as e:
        found = "found here" if target == "auto" else f"at {target}"
        hint = (
            f"a head on loopback needs {LOOPBACK_VAR}=0 where it starts and here, "
            "or pass --address HOST:PORT"
            if target == "auto"
            else f"check that `ray status --address {target}` answers, or start one with "
            f"`{START_HINT}`"
        )
        raise RayConnectError(
            f"the Ray cluster {found} does not answer at {gcs} within "
            f"{ANSWER_TIMEOUT_S:g} s ({getattr(e, 'strerror', None) or e}): {hint}"
        ) from None


def free_resources() -> str:
    """What the connected Ray cluster has free, for messages: "CPU 2/4, GPU 0/0"."""
    import ray

    free, total = ray.available_resources(), ray.cluster_resources()
    return ", ".join(
        f"{name} {free.get(name, 0):g}/{total.get(name, 0):g}" for name in ("CPU", "GPU")
    )
