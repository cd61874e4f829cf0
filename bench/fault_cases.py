"""Fault scenarios of issue #12 for bench/faults.py: hangs, orphans, mixed runs, listeners.

Each case measures what the user meets: the time until the failure is reported
(detect), until the cluster takes a collective cell again (usable), what is lost, and
how many of our processes and files are left. Processes are counted by process tree
from the pids we started (psutil children), never by scanning the process list.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psutil

FAILS_IN_COLLECTIVE = """
import sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    time.sleep(0.5)
    sys.exit(2)
t = torch.ones(1)
dist.all_reduce(t)
"""
FAILS_BEFORE_RENDEZVOUS = """
import os, sys, time, torch.distributed as dist
if os.environ["RANK"] == "1":
    sys.exit(2)
dist.init_process_group("gloo")
"""
# A DDP model kept on rank 0 across replacements: its old group (and store) stays alive
# while new ones are created, as in a notebook that re-runs its training cell.
KEEP_DDP = (
    "import torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
    "models = globals().setdefault('models', [])\nmodels.append(DDP(nn.Linear(2, 2)))\n"
)
KILL_1 = (
    "import os, signal, time\nfor i in range(200):\n    if rank == 1 and i == 3:\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
    "    t = torch.ones(1)\n    dist.all_reduce(t)\n    time.sleep(0.02)\n"
)
BACKGROUND = """%%dist_train --name {name} --background --no-dashboard
import time
for step in range(40):
    report(step=step, loss=1.0)
    time.sleep(0.05)
"""
LISTENERS = """
import json, threading, time, psutil
from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.training import RunSpec, TrainingRun
def listening():
    procs = [psutil.Process()] + psutil.Process().children(recursive=True)
    return {c.laddr.ip for p in procs for c in p.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN}
cluster = DistCluster(ClusterSpec(n=2)); cluster.start_sync()
seen = listening()
run = TrainingRun(cluster, RunSpec(code="import time\\nreport(step=0, loss=1.0)\\ntime.sleep(2)"))
t = threading.Thread(target=run.run); t.start(); time.sleep(1.0); seen |= listening(); t.join(60)
cluster.stop_sync()
print("LISTENING " + json.dumps(sorted(seen)))
"""
READ_ONLY = """
import os, time
from IPython.testing.globalipapp import start_ipython
ip = start_ipython(); ip.run_line_magic("load_ext", "dist_notebook")
t0 = time.perf_counter()
ip.run_line_magic("dist_cluster", "start -n 2 --cpu")
r = ip.run_cell("%%dist_train --name ro --no-dashboard\\nfor s in range(3):\\n    report(step=s)")
ip.run_line_magic("dist_cluster", "stop")
print("RESULT", r.error_in_exec is None, round(time.perf_counter() - t0, 2))
"""


def isolated(
    script: str, *, read_only: list[Path] = (), hosts: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess[str] | None:
    """Run *script* in a mount namespace (read-only dirs, a private /etc/hosts); None
    where that needs root and we are not."""
    if os.geteuid() != 0:
        return None
    mounts = [
        f"mount --bind {shlex.quote(str(d))} {shlex.quote(str(d))} && "
        f"mount -o remount,bind,ro {shlex.quote(str(d))} {shlex.quote(str(d))}"
        for d in read_only
    ]
    if hosts is not None:
        mounts.append(f"mount --bind {shlex.quote(str(hosts))} /etc/hosts")
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
    command += [" && ".join([*mounts, 'exec "$@"']), "sh", sys.executable, "-c", script]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=180, env=dict(os.environ, **(env or {}))
    )


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.NoSuchProcess:
            continue
    return left


def wait_until(condition: Any, timeout: float) -> float | None:
    t0 = time.perf_counter()
    while not condition():
        if time.perf_counter() - t0 > timeout:
            return None
        time.sleep(0.01)
    return time.perf_counter() - t0


class Issue12:
    """The cases, run on the Bench's shell and current cluster (see bench/faults.py)."""

    def __init__(self, bench: Any, root: Path) -> None:
        self.b = bench
        self.root = root

    def tree(self) -> list[psutil.Process]:
        from dist_notebook.cluster.reap import process_tree

        return process_tree(self.b.cluster.engines.local_pids())

    def files(self) -> list[str]:
        from dist_notebook.cluster.reap import cluster_files

        c = self.b.cluster
        return cluster_files(c.profile_dir, c.engines.ipp_cluster_id)

    def pull_class(self) -> None:
        self.b.cell("%%dist\nclass Cfg:\n    lr = 0.1\ncfg = Cfg()\n")
        box: dict[str, Any] = {}
        t0 = time.perf_counter()
        worker = threading.Thread(
            target=lambda: box.update(v=self.b.magic("dist_pull", "cfg")), daemon=True
        )
        worker.start()
        worker.join(30)
        took = None if worker.is_alive() else time.perf_counter() - t0
        ok = getattr(box.get("v"), "lr", None) == 0.1
        self.b.row("%dist_pull of an instance of a %%dist class", took, took, lost=0 if ok else "-")

    def run_fails_in_collective(self) -> None:
        self._failing_script(
            "stuck.py",
            FAILS_IN_COLLECTIVE,
            "%dist_run: rank 1 exits while rank 0 is in all_reduce",
            "torch's default: 30 minutes",
        )

    def run_fails_before_rendezvous(self) -> None:
        self._failing_script(
            "early.py",
            FAILS_BEFORE_RENDEZVOUS,
            "%dist_run: rank 1 exits before init_process_group, rank 0 in the rendezvous",
            "detect = the whole %dist_run; torch's default: 30 minutes",
        )

    def _failing_script(self, name: str, text: str, label: str, note: str) -> None:
        script = self.root / name
        script.write_text(text)
        t0 = time.perf_counter()
        try:
            self.b.magic("dist_run", str(script))
        except Exception as e:  # UsageError naming the failed rank: the expected outcome
            print(f"dist_run: {e}", flush=True)
        detect = time.perf_counter() - t0
        self.b.row(label, detect, detect + self.b.reduce(), note=note)

    def replaced_three_times(self) -> None:
        """Rank 1 SIGKILLed and replaced three times, a DDP model kept on rank 0."""
        from dist_notebook.cluster.onranks.execute import run_on_ranks

        restarts = []
        worked = 0
        t0 = time.perf_counter()
        for _ in range(3):
            run_on_ranks(self.b.cluster, KEEP_DDP, timeout=60)
            self.b.cell("%%dist\n" + KILL_1)
            t1 = time.perf_counter()
            if self.b.cluster.state.value != "ready":
                self.b.magic("dist_cluster", "restart")
            restarts.append(time.perf_counter() - t1)
            try:
                self.b.reduce()
                worked += 1
            except Exception as e:  # the defect this case checks: said in the row
                print(f"collective after a replacement: {e}", flush=True)
        run_on_ranks(self.b.cluster, "models = []", timeout=60)  # the old groups go
        usable = time.perf_counter() - t0 + self.b.reduce()
        self.b.row(
            "rank 1 SIGKILLed and replaced 3 times (DDP models kept on rank 0)",
            max(restarts),
            usable,
            lost=f"{3 - worked} of 3 collectives failed",
            note="detect = the slowest replacement; usable = the whole case",
        )

    def resume_after_kill(self) -> None:
        """Issue #4's resume case, where rank 0 died with SIGABRT in 2 of 3 runs."""
        try:
            self.b.checkpoint_resume(self.root / "resume")
        except AssertionError as e:  # a row saying what failed
            self.b.row("rank SIGKILLed at step 13, --resume", None, None, note=f"{e}"[:200])
            if self.b.cluster.state.value != "ready":
                self.b.magic("dist_cluster", "restart")

    def two_runs(self) -> None:
        from dist_notebook.training import load_run

        magics = self.b.ip.magics_manager.registry["TrainMagics"]
        magics.last_result = None
        self.b.cell(BACKGROUND.format(name="bgA"))
        t0 = time.perf_counter()
        refused = self.b.cell(BACKGROUND.format(name="bgB")).error_in_exec
        detect = time.perf_counter() - t0
        wait_until(lambda: magics.last_result is not None, 120)
        pairs = [(r.rank, r.step) for r in load_run("bgA").records()]
        want = {(rank, step) for rank in (0, 1) for step in range(40)}
        lost = len(want - set(pairs)) + (len(pairs) - len(set(pairs)))
        self.b.row(
            "second %%dist_train --background while one runs",
            detect,
            time.perf_counter() - t0,
            lost=lost,
            note=f"refused: {type(refused).__name__}; lost = missing + duplicated records",
        )

    def stopped_rank(self) -> None:
        tree = self.tree()
        pid = self.b.cluster.ranks[1].pid
        os.kill(pid, signal.SIGSTOP)
        t0 = time.perf_counter()
        detect = wait_until(lambda: self.b.cluster.ranks[1].state == "unresponsive", 60)
        os.kill(pid, signal.SIGCONT)  # and nothing else: the cluster replaces the rank
        ready = wait_until(lambda: self.b.cluster.state.value == "ready", 60)
        usable = time.perf_counter() - t0 + self.b.reduce()
        now = {p.pid for p in self.tree()}
        left = [p for p in alive(tree) if p.pid not in now]
        self.b.row(
            "rank SIGSTOPped, then SIGCONT alone",
            detect,
            usable,
            left=len(left),
            ready_after_sigcont_s=ready,
            note="detect = until status says unresponsive (heartbeats: ~5 s); "
            "usable = SIGSTOP to a collective after the automatic replacement",
        )

    def controller_killed(self) -> None:
        tree, files = self.tree(), self.files()
        os.kill(self.b.cluster.engines.controller_pid, signal.SIGKILL)
        t0 = time.perf_counter()
        detect = wait_until(lambda: self.b.cluster.failure is not None, 30)
        gone = wait_until(lambda: not alive(tree), 10)
        left_before_restart = len(alive(tree))
        self.b.magic("dist_cluster", "restart")
        usable = time.perf_counter() - t0 + self.b.reduce()
        left_files = [f for f in files if os.path.exists(f)]
        self.b.row(
            "controller SIGKILLed, %dist_cluster restart",
            detect,
            usable,
            left=left_before_restart,
            files=len(left_files),
            all_gone_s=gone,
            note="processes left = old tree 10 s after the kill, before the restart",
        )

    def limits(self) -> None:
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        saved, self.b.session.cluster = self.b.session.cluster, None
        for flags, name in (("-n 10000", "-n 10000"), ("--ip 10.9.9.9", "--ip of another host")):
            self.b.session.cluster = None
            t0 = time.perf_counter()
            try:
                self.b.magic("dist_cluster", f"start --cpu {flags}")
                message = "started"
            except Exception as e:  # the refusal is the expected outcome
                message = str(e)
            took = time.perf_counter() - t0
            started = {p.pid for p in psutil.Process().children(recursive=True)} - before
            self.b.row(
                f"%dist_cluster start {name}",
                took,
                None,
                left=len(started),
                message_lines=len(message.splitlines()),
                note=message[:90],
            )
        self.b.session.cluster = saved

    def subset_collective(self) -> None:
        self.b.cell(
            "%%dist\nimport datetime\n"
            "short = dist.new_group(timeout=datetime.timedelta(seconds=3))\n"
        )
        t0 = time.perf_counter()
        error = self.b.cell(
            "%%dist --ranks 0\nt = torch.ones(1)\ndist.all_reduce(t, group=short)\n"
        ).error_in_exec
        detect = time.perf_counter() - t0
        named = "rank 1 was not in this cell" in str(error)
        self.b.row(
            "--ranks 0 with a collective (group timeout 3 s)",
            detect,
            detect + self.b.reduce(),
            note=f"absent rank named: {named}",
        )

    def scripts_like_torchrun(self) -> None:
        (self.root / "datautils_b.py").write_text("SIZE = 7\n")
        uses = self.root / "uses.py"
        uses.write_text("import datautils_b\n")
        gpu = self.root / "gpu.py"
        gpu.write_text("import torch\ntorch.cuda.set_device(0)\n")
        results = {}
        from IPython.utils.capture import capture_output

        for name, path in (("sibling import", uses), ("CUDA on CPU ranks", gpu)):
            with capture_output() as captured:
                try:
                    self.b.ip.run_line_magic("dist_run", str(path))
                    results[name] = "ok"
                except Exception as e:  # the CUDA case fails, by design
                    results[name] = f"failed: {type(e).__name__}"
            if "the ranks have no GPU" in captured.stderr:
                results[name] += ", says the ranks have no GPU and how to start GPU ranks"
        self.b.row(
            "%dist_run: sibling module / CUDA script on CPU ranks",
            None,
            None,
            note=json.dumps(results),
        )

    def file_modes(self) -> None:
        loose = [f for f in self.files() if stat.S_IMODE(os.stat(f).st_mode) & 0o077]
        self.b.row("cluster files readable by others", None, None, files=len(loose))

    def listeners(self) -> None:
        other = next(
            (
                a.address
                for addrs in psutil.net_if_addrs().values()
                for a in addrs
                if a.family == socket.AF_INET and not a.address.startswith("127.")
            ),
            "127.0.0.2",
        )
        hosts = self.root / "hosts"
        hosts.write_text(f"127.0.0.1 localhost\n{other} {socket.gethostname()}\n")
        done = isolated(LISTENERS, hosts=hosts)
        if done is None:
            self.b.row(
                "listeners with the hostname on another address",
                None,
                None,
                note="needs root (a mount namespace)",
            )
            return
        line = next((x for x in done.stdout.splitlines() if x.startswith("LISTENING ")), "")
        found = json.loads(line[10:]) if line else ["failed: " + done.stderr[-200:]]
        self.b.row(
            "listeners with the hostname on another address",
            None,
            None,
            note=f"hostname -> {other}; listening on {found}",
            beyond_cluster_address=len([a for a in found if a != "127.0.0.1"]),
        )

    def read_only_store(self) -> None:
        shelf = self.root / "shelf"
        shelf.mkdir(exist_ok=True)
        env = {"DIST_NOTEBOOK_STORE": str(shelf / "runs.sqlite")}
        done = isolated(textwrap.dedent(READ_ONLY), read_only=[shelf], env=env)
        if done is None:
            self.b.row("store in a read-only directory", None, None, note="needs root")
            return
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), "")
        ok, took = (line.split()[1:] + ["?", "?"])[:2]
        warnings = len([x for x in done.stderr.splitlines() if "DIST_NOTEBOOK_STORE to a" in x])
        self.b.row(
            "store in a read-only directory: start, 3-step run, stop",
            None,
            float(took) if took != "?" else None,
            lost="all records (by design)",
            note=f"run ok: {ok}; warnings: {warnings}",
        )

    def run_all(self) -> None:
        for case in (
            self.pull_class,
            self.run_fails_in_collective,
            self.run_fails_before_rendezvous,
            self.replaced_three_times,
            self.resume_after_kill,
            self.two_runs,
            self.subset_collective,
            self.scripts_like_torchrun,
            self.file_modes,
            self.stopped_rank,
            self.controller_killed,
            self.limits,
            self.listeners,
            self.read_only_store,
        ):
            try:
                case()
            except Exception as e:  # one failing case is a row, not the end of the bench
                self.b.row(case.__name__, None, None, note=f"bench case failed: {e}"[:200])
