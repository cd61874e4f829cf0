"""Clusters beyond one machine: host lists, the listening interface, remote engine env.

``--hosts h1:2,h2:2`` means two ranks on h1 and two on h2 (a host without ``:N`` gets
one). ``--interface eth1`` means "listen on that interface's IPv4 address" (the
controller, the metrics collector); ranks then find their own route to it, and gloo
and NCCL are told which local interface carries it (``GLOO_SOCKET_IFNAME``).
Nothing listens on 0.0.0.0 unless the user passes ``--ip 0.0.0.0`` themselves.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any

from .. import envvars

if TYPE_CHECKING:
    from .spec import ClusterSpec

_HOST = re.compile(r"^(?:[A-Za-z0-9_.-]+@)?[A-Za-z0-9_.-]+$")


class HostsError(ValueError):
    """A host list or a remote option is wrong; the message names the fix."""


def parse_hosts(text: str) -> tuple[tuple[str, int], ...]:
    """``"h1:2,h2"`` -> ``(("h1", 2), ("h2", 1))``, or a HostsError saying how to write it."""
    out: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, _, count = part.partition(":")
        if not _HOST.match(name):
            raise HostsError(
                f"--hosts: {name!r} is not a host name; write it like node1:2,node2:2 "
                "(HOST or user@HOST, then :N ranks on it)"
            )
        try:
            n = int(count) if count else 1
        except ValueError:
            raise HostsError(
                f"--hosts: {part!r} has a rank count that is not a whole number; "
                "write it like node1:2"
            ) from None
        if n < 1:
            raise HostsError(f"--hosts: {part!r} asks for {n} ranks; give 1 or more")
        if any(name == seen for seen, _ in out):
            raise HostsError(f"--hosts lists {name} twice; give its rank count once ({name}:N)")
        out.append((name, n))
    if not out:
        raise HostsError("--hosts is empty; write it like node1:2,node2:2")
    return tuple(out)


def format_hosts(hosts: tuple[tuple[str, int], ...]) -> str:
    return ",".join(f"{h}:{n}" for h, n in hosts)


def interface_address(name: str) -> str:
    """The IPv4 address of the local interface *name*; a HostsError naming the choices."""
    import socket

    import psutil

    addrs = psutil.net_if_addrs()
    for addr in addrs.get(name, []):
        if addr.family == socket.AF_INET:
            return str(addr.address)
    have = ", ".join(
        f"{n} ({a.address})"
        for n, found in sorted(addrs.items())
        for a in found
        if a.family == socket.AF_INET
    )
    if name not in addrs:
        raise HostsError(f"--interface {name}: no such interface here; choose one of: {have}")
    raise HostsError(f"--interface {name} has no IPv4 address; choose one of: {have}")


def remote_engine_env(spec: ClusterSpec, env: dict[str, str]) -> dict[str, str]:
    """The engine environment for engines on other hosts.

    The kernel does not know their cores or their local rank counts: the boot module
    works out OMP_NUM_THREADS and LOCAL_WORLD_SIZE on each host (see
    ``engine.rankenv``), and MASTER_ADDR once rank 0's address is known. They get no
    stack folder: the hang report reads local ranks only (``cluster.onranks.stacks``).
    """
    out = dict(env)
    for name in (
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        envvars.PARENT_PID,
        envvars.STACK_DIR,
    ):
        out.pop(name, None)
    if spec.threads is None:
        out.pop("OMP_NUM_THREADS", None)
        out.pop("MKL_NUM_THREADS", None)
    out[envvars.CONTROLLER_IP] = spec.ip
    if spec.gpus_per_node:
        out.pop(envvars.CPU, None)
        out[envvars.GPUS_PER_NODE] = str(spec.gpus_per_node)
    return out


def lost_ranks(ranks: list[Any], registered: set[int]) -> dict[int, str]:
    """Ranks whose engine ipyparallel has dropped (missed heartbeats): {rank: how}."""
    return {
        r.rank: f"its engine on host {r.host} stopped answering (host down or unreachable)"
        for r in ranks
        if r.engine_id not in registered
    }


def check_ip(ip: str) -> None:
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        raise HostsError(
            f"--ip {ip!r} is not an IP address; give one of this machine's addresses, "
            "or --interface NAME"
        ) from None


def listen_ip(ip: str | None, interface: str | None) -> str:
    """The address to listen on from ``--ip`` / ``--interface`` (loopback by default)."""
    if ip and interface:
        raise HostsError("give --ip or --interface, not both")
    if interface:
        return interface_address(interface)
    ip = ip or "127.0.0.1"
    check_ip(ip)
    return ip


def network_of(ip: str) -> str | None:
    """``10.0.0.0/24`` for the local interface holding *ip* (None: not a local address)."""
    import socket

    import psutil

    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and a.address == ip and a.netmask:
                return str(ipaddress.ip_interface(f"{ip}/{a.netmask}").network)
    return None
