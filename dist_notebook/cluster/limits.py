"""What this machine can hold, checked before anything starts.

Without a limit, ``-n 10000`` started processes until threads ran out (217 processes,
5.6 GB in 60 s in a capped cgroup). A local rank is an engine with torch loaded: measured
258 MB resident on CPU (with the 42 MB nanny local engines had before, 300 MB; the limit
keeps that margin), so the count of local ranks is held to what the available memory
takes. ``force`` overrides the check.
"""

from __future__ import annotations

import ipaddress
import os
import socket

import psutil

from .spec import ClusterConfigError, ClusterSpec

RANK_MEMORY = 300 * 2**20  # engine 258 MB resident with torch imported (measured), + margin
ALL_INTERFACES = ("0.0.0.0", "::", "*")
MAX_IDLE_SECONDS = 365 * 86400.0  # a detached cluster's idle timeout (a year)


def check_idle_timeout(idle_timeout: object) -> float | None:
    """A detached cluster's idle timeout as the keeper takes it (seconds, or None for
    never); ClusterConfigError naming the range for anything else (the magic's
    ``--idle-timeout`` is bounded by its parser; this bounds the API's)."""
    if idle_timeout is None:
        return None
    if isinstance(idle_timeout, bool) or not isinstance(idle_timeout, int | float):
        raise ClusterConfigError(
            f"idle_timeout={idle_timeout!r}: give a number of seconds, or None for never"
        )
    # nan fails every comparison, so "not 0 < value" refuses it, as it refuses inf.
    if not 0 < idle_timeout <= MAX_IDLE_SECONDS:
        raise ClusterConfigError(
            f"idle_timeout={idle_timeout!r}: give more than 0 and at most "
            f"{MAX_IDLE_SECONDS:.0f} seconds (a year), or None for never"
        )
    return float(idle_timeout)


def check_capacity(spec: ClusterSpec, asked: str = "-n") -> None:
    """Refuse more local ranks than memory and the process limit allow (unless forced).

    *asked* is how the user asked for ``spec.n`` ranks: ``-n`` at a start, ``scale`` for
    a scale (whose spec is the cluster's with the new count)."""
    if spec.force or not spec.engines.on_this_machine:
        return
    available = psutil.virtual_memory().available
    fits = max(1, available // RANK_MEMORY)
    pids = _pids_left()
    if pids is not None:
        fits = min(fits, max(1, pids // 3))  # an engine, a nanny (remote launchers) and threads
    if spec.n > fits:
        force = "--force to start them anyway" if asked == "-n" else "a start with --force"
        raise ClusterConfigError(
            f"{asked} {spec.n} is more ranks than this machine can hold: each rank takes about "
            f"{RANK_MEMORY // 2**20} MB and {available / 2**30:.1f} GiB is available, room for "
            f"{fits}; use {asked} {fits} or fewer, or {force}"
        )


def _pids_left() -> int | None:
    """Processes this cgroup may still start (pids.max - pids.current), if capped."""
    try:
        with open("/proc/self/cgroup") as f:
            path = f.read().strip().split("::", 1)[-1]
        base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(base, "pids.max")) as f:
            limit = f.read().strip()
        with open(os.path.join(base, "pids.current")) as f:
            current = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else int(limit) - current


def check_address(ip: str) -> None:
    """The controller, the store and the metrics channel listen on *ip*: it must be an
    address of this machine (or every interface, by the user's explicit choice)."""
    if ip in ALL_INTERFACES:
        return
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        raise ClusterConfigError(
            f"--ip {ip!r} is not an IP address: give an address of this machine, e.g. "
            f"{_local_addresses()[0]} (the default, loopback)"
        ) from None
    local = _local_addresses()
    if ip not in local:
        raise ClusterConfigError(
            f"--ip {ip} is not an address of this machine ({socket.gethostname()} has "
            f"{', '.join(local)}): the controller listens there; give one of those"
        )


def _local_addresses() -> list[str]:
    found = []
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                found.append(a.address.split("%")[0])
    return sorted(set(found), key=lambda a: (":" in a, not a.startswith("127."), a))
