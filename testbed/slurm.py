"""A real Slurm cluster on the test hosts: munged, slurmctld on h1, one slurmd per host.

Everything lives in the session's temporary directory (configuration, munge key and
socket, spool and state dirs, logs); ``SLURM_CONF`` points the kernel's ``sbatch`` /
``scancel`` / ``squeue`` at it. Slurm's ports are those of the hosts' own network
namespaces, so nothing listens in the machine's namespace but munged's unix socket.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from .hosts import TestHosts, run, which

SLURM_CONF = """\
ClusterName=dntest
SlurmctldHost={ctl}({ctl_addr})
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
InactiveLimit=0
KillWait=2
MinJobAge=2
{nodes}
PartitionName=test Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def start_slurm(hosts: TestHosts) -> tuple[Path, subprocess.Popen]:
    """Start munged, slurmctld and the slurmds; return (slurm.conf, munged's process)."""
    d = hosts.tmp / "slurm"
    d.mkdir(mode=0o700, exist_ok=True)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    munged = subprocess.Popen(
        [
            which("munged") or "munged",
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={d}/munge.sock",
            f"--pid-file={d}/munged.pid",
            f"--log-file={d}/munged.log",
            f"--seed-file={d}/munged.seed",
            "--num-threads=2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        return _start_daemons(hosts, d), munged
    except BaseException:
        munged.terminate()
        munged.wait(10)
        raise


def _start_daemons(hosts: TestHosts, d: Path) -> Path:
    ctl = hosts.hosts[0]
    cores = os.cpu_count() or 1
    nodes = "\n".join(
        f"NodeName={h.name} NodeAddr={h.address} CPUs={cores} State=UNKNOWN" for h in hosts.hosts
    )
    conf = d / "slurm.conf"
    conf.write_text(
        SLURM_CONF.format(
            ctl=ctl.name,
            ctl_addr=ctl.address,
            d=d,
            nodes=nodes,
            names=",".join(h.name for h in hosts.hosts),
        )
    )
    (d / "state").mkdir(exist_ok=True)
    _wait_file(d / "munge.sock", "munged's socket")
    env = ("env", f"SLURM_CONF={conf}")
    ctl.exec(*env, which("slurmctld") or "slurmctld", "-i")
    ctl.daemons["slurmctld"] = ctl.daemon_pid(d / "slurmctld.pid")
    for h in hosts.hosts:
        (d / f"spool-{h.name}").mkdir(exist_ok=True)
        h.exec(*env, which("slurmd") or "slurmd")
        h.daemons["slurmd"] = h.daemon_pid(d / f"slurmd-{h.name}.pid")
    _wait_idle(conf, len(hosts.hosts))
    return conf


def _wait_file(path: Path, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not appear: {path}")
        time.sleep(0.1)


def _wait_idle(conf: Path, count: int, timeout: float = 60) -> None:
    """Until every node is idle (slurmd registered with slurmctld)."""
    env = dict(os.environ, SLURM_CONF=str(conf))
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %t"], env=env, capture_output=True, text=True
        )
        out = done.stdout + done.stderr
        if done.returncode == 0 and out.count("idle") >= count:
            return
        time.sleep(0.5)
    raise TimeoutError(f"Slurm nodes not idle within {timeout} s: {out}")


def jobs(conf: Path) -> list[str]:
    """The job ids Slurm still has (pending or running)."""
    out = run("env", f"SLURM_CONF={conf}", "squeue", "-h", "-o", "%i %T").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]
