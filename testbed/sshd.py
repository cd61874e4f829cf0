"""A real OpenSSH server on each test host, with a key pair made for the test session."""

from __future__ import annotations

import os
from pathlib import Path

from .hosts import Host, TestHosts, run, which

SSHD_CONFIG = """\
ListenAddress {address}
Port 22
HostKey {dir}/host_key
PidFile {dir}/{name}-sshd.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 100
MaxSessions 100
Subsystem sftp internal-sftp
"""

CLIENT_CONFIG = """\
Host {names}
  IdentityFile {dir}/id_ed25519
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  BatchMode yes
  LogLevel ERROR
  ConnectTimeout 5
  ServerAliveInterval 2
  ServerAliveCountMax 3
"""


def start_sshd(hosts: TestHosts) -> Path:
    """Start sshd on every host; return the ssh client config that reaches them.

    The config also names each host (``Host h1`` -> its address), so ``--hosts h1,h2``
    works as on a real cluster where names resolve.
    """
    d = hosts.tmp / "ssh"
    d.mkdir(mode=0o700, exist_ok=True)
    run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "id_ed25519"))
    run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key"))
    (d / "authorized_keys").write_text((d / "id_ed25519.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    sshd = which("sshd")
    assert sshd is not None
    for host in hosts.hosts:
        cfg = d / f"{host.name}-sshd_config"
        cfg.write_text(SSHD_CONFIG.format(address=host.address, dir=d, name=host.name))
        host.exec(sshd, "-f", str(cfg), "-E", str(d / f"{host.name}-sshd.log"))
        host.daemons["sshd"] = host.daemon_pid(d / f"{host.name}-sshd.pid")
    lines = [CLIENT_CONFIG.format(names=" ".join(_names(hosts)), dir=d)]
    for host in hosts.hosts:
        lines.append(f"Host {host.name}\n  HostName {host.address}\n")
    config = d / "config"
    config.write_text("\n".join(lines))
    return config


def _names(hosts: TestHosts) -> list[str]:
    return [h.name for h in hosts.hosts] + [h.address for h in hosts.hosts]


def ssh(config: Path, host: Host, *cmd: str) -> str:
    return run("ssh", "-F", str(config), host.name, "--", *cmd).stdout
