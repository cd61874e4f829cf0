"""Test hosts on one machine: a network, UTS, PID and mount namespace per host.

Each host has its own address on a private bridge (10.213.S.0/24, S chosen per test
session), its own hostname, and its own PID namespace whose first process (a small
reaper, ``init``) inherits every orphan of that host. So "what still runs on host h1"
is the process tree under that init, found from a pid we started (no process-list
scan), and killing init ends everything on the host, also when a test fails.

The kernel (the test process) stays in the machine's own namespace and reaches the
hosts through the bridge address ``gateway`` (10.213.S.1). No route to any other
address is added: traffic stays on loopback and on these addresses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

TOOLS = {
    "ssh": ("sshd", "ssh", "ssh-keygen"),
    "slurm": ("slurmctld", "slurmd", "munged", "sbatch"),
    "mpi": ("mpiexec", "orted", "sshd", "ssh"),
}
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")

# pid 1 of a host: set the hostname, then reap orphans until told to stop. When it
# exits the kernel kills every other process of the host's PID namespace.
INIT = """
import os, signal, socket, sys
socket.sethostname(sys.argv[1])
def reap(*_):
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
signal.signal(signal.SIGCHLD, reap)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
print("ready", flush=True)
while True:
    signal.pause()
"""


def which(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in SBIN:
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


def why_not(kind: str) -> str | None:
    """None when test hosts for *kind* can be built here; else the reason."""
    if os.geteuid() != 0:
        return "test hosts need root (network, UTS and PID namespaces); CI runs as root"
    for tool in ("ip", "unshare", "nsenter", *TOOLS[kind]):
        if which(tool) is None:
            return f"{tool} is missing: run `make testhosts` as root (Debian packages)"
    return None


def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=60)


@dataclass
class Host:
    name: str
    address: str
    netns: str
    init: subprocess.Popen | None = None
    daemons: dict[str, int] = field(default_factory=dict)

    @property
    def init_pid(self) -> int:
        """pid (in the machine's namespace) of this host's pid 1."""
        assert self.init is not None
        children = psutil.Process(self.init.pid).children()
        return children[0].pid

    def enter(self) -> list[str]:
        """Command prefix that runs a command on this host."""
        return ["nsenter", "-t", str(self.init_pid), "-n", "-u", "-p", "-m", "--"]

    def exec(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return run(*self.enter(), *cmd, check=check)

    def processes(self) -> list[psutil.Process]:
        """Every live process on this host but its init and the daemons we started."""
        try:
            tree = psutil.Process(self.init_pid).children(recursive=True)
        except (psutil.NoSuchProcess, IndexError):
            return []
        keep = set(self.daemons.values())
        out = []
        for p in tree:
            try:
                if p.pid in keep or p.status() == psutil.STATUS_ZOMBIE:
                    continue
                # A daemon's helpers: sshd's per-connection process, slurmctld's script
                # runner. (slurmd's slurmstepd runs a job: that one counts.)
                if p.ppid() in keep and p.name() in ("sshd", "slurmctld", "slurmscriptd"):
                    continue
            except psutil.NoSuchProcess:
                continue
            out.append(p)
        return out

    def daemon_pid(self, pidfile: Path, timeout: float = 10.0) -> int:
        """The pid (machine namespace) of a daemon that wrote *pidfile* (host numbering)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pidfile.exists() and pidfile.read_text().strip():
                inner = int(pidfile.read_text().split()[0])
                for p in psutil.Process(self.init_pid).children(recursive=True):
                    if _inner_pid(p.pid) == inner:
                        return p.pid
            time.sleep(0.05)
        raise TimeoutError(f"{pidfile} not written on {self.name}")


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process dies, even by SIGKILL (the
    host's pid 1 then dies too: unshare --kill-child), so no host outlives its tests."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _inner_pid(pid: int) -> int:
    """The pid a process has inside its own PID namespace (NSpid's last field)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    return pid


class TestHosts:
    """*count* hosts h1..hN on a private bridge; ``down()`` removes everything."""

    made = 0  # host sets built by this process: each gets its own names and subnet

    def __init__(self, tmp: Path, count: int = 2) -> None:
        self.tmp = tmp
        TestHosts.made += 1
        tag = f"{os.getpid() % 10000}{TestHosts.made}"
        self.subnet = f"10.213.{20 + (os.getpid() * 4 + TestHosts.made) % 200}"
        self.gateway = f"{self.subnet}.1"
        self.bridge = f"dnbr{tag}"
        self.hosts = [
            Host(f"h{i}", f"{self.subnet}.{10 + i}", f"dn{tag}h{i}") for i in range(1, count + 1)
        ]
        self._veths: list[str] = []

    def up(self) -> TestHosts:
        try:
            run("ip", "link", "add", self.bridge, "type", "bridge")
            run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            run("ip", "link", "set", self.bridge, "up")
            for host in self.hosts:
                self._add_host(host)
            self._hosts_file()
        except BaseException:
            self.down()
            raise
        return self

    def _add_host(self, host: Host) -> None:
        veth = f"{host.netns}v"
        run("ip", "netns", "add", host.netns)
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
        self._veths.append(veth)
        run("ip", "link", "set", veth, "master", self.bridge, "up")
        run("ip", "link", "set", f"{veth}p", "netns", host.netns, "name", "eth0")
        ns = ("ip", "netns", "exec", host.netns)
        run(*ns, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
        run(*ns, "ip", "link", "set", "eth0", "up")
        run(*ns, "ip", "link", "set", "lo", "up")
        # nsenter, not `ip netns exec`: that one remounts /sys, hiding the cgroup
        # hierarchy that slurmd needs.
        init = host.init = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{host.netns}",
                "unshare",
                "--uts",
                "--pid",
                "--mount",
                "--fork",
                "--mount-proc",
                "--kill-child",
                sys.executable,
                "-c",
                INIT,
                host.name,
            ],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=_die_with_parent,
        )
        assert init.stdout is not None
        if init.stdout.readline().strip() != "ready":
            raise RuntimeError(f"test host {host.name} did not start")

    def _hosts_file(self) -> None:
        """Names resolve on the hosts as on a real cluster: an /etc/hosts of their own
        (bound over the file in each host's mount namespace only)."""
        path = self.tmp / "etc-hosts"
        lines = ["127.0.0.1 localhost", *(f"{h.address} {h.name}" for h in self.hosts)]
        path.write_text("\n".join(lines) + "\n")
        for host in self.hosts:
            host.exec("mount", "--bind", str(path), "/etc/hosts")

    def link(self, host: Host, up: bool) -> None:
        """Take a host's link down (a network failure) or up again."""
        run("ip", "link", "set", f"{host.netns}v", "up" if up else "down")

    def down(self) -> None:
        """Kill every process of every host, remove the namespaces and the bridge."""
        for host in self.hosts:
            if host.init is not None and host.init.poll() is None:
                host.init.kill()  # --kill-child: pid 1 of the host dies, then all of it
                host.init.wait(10)
            run("ip", "netns", "del", host.netns, check=False)
        for veth in self._veths:
            run("ip", "link", "del", veth, check=False)
        run("ip", "link", "del", self.bridge, check=False)
