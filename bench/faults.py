"""Fault scenarios, each measured once on a real cluster: what a failure costs the user.

    python -m bench run faults               # every scenario, 50 start/stop cycles
    python -m bench run faults --cycles 5    # (or --quick) fewer cycles

For each scenario: the time until the failure is reported (the cell fails, the report
prints, the processes are gone), the time until the cluster takes a collective cell
again, the training steps lost, and how many of our processes and files are left
afterwards (by process tree from the pids we started, never by scanning the process
list). Prints a markdown table and writes ``bench/results/faults.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import md_table, quick, quietly, shell, use_scratch_store, write_result

ALL_REDUCE = "t = torch.ones(1) * (rank + 1)\ndist.all_reduce(t)\nassert int(t.item()) == 3"
KILL_1_IN_LOOP = (
    "import os, signal, time\nfor i in range(200):\n    if rank == 1 and i == 5:\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
    "    t = torch.ones(1)\n    dist.all_reduce(t)\n    time.sleep(0.02)\n"
)
CKPT_CELL = """
import os, signal, torch, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
torch.manual_seed(1000 + rank)
ckpt = checkpointer(model, opt)
first_step = ckpt.restore()
for step in range(first_step, 20):
    if rank == {kill_rank} and step == 13:
        os.kill(os.getpid(), signal.SIGKILL)
    x = torch.randn(16, 4)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    report(step=step, loss=loss)
    ckpt.save(step)
"""
WEIGHTS = "{k: v.detach().clone() for k, v in model.module.state_dict().items()}"


def alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], timeout: float) -> tuple[list[int], float]:
    t0 = time.perf_counter()
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.perf_counter() - t0 > timeout:
            return left, time.perf_counter() - t0
        time.sleep(0.01)


def pids_of(cluster: Any) -> list[int]:
    return [r.pid for r in cluster.ranks] + [cluster.engines.controller_pid]


class Bench:
    def __init__(self) -> None:
        self.ip = shell()
        self.ip.run_line_magic("load_ext", "dist_notebook")
        from dist_notebook.magics.session import Session

        self.session = Session.for_shell(self.ip)
        self.rows: list[dict[str, Any]] = []

    # helpers ----------------------------------------------------------------------
    @property
    def cluster(self) -> Any:
        return self.session.cluster

    def magic(self, name: str, line: str) -> Any:
        return quietly(self.ip.run_line_magic, name, line)[0]

    def cell(self, text: str) -> Any:
        return quietly(self.ip.run_cell, text)[0]

    def reduce(self) -> float:
        """Seconds for one collective cell (raises if the cluster cannot run it)."""
        from dist_notebook.cluster.onranks.execute import run_on_ranks

        t0 = time.perf_counter()
        run_on_ranks(self.cluster, ALL_REDUCE, timeout=60)
        return time.perf_counter() - t0

    def row(
        self,
        scenario: str,
        detect: float | None,
        usable: float | None,
        lost: Any = "-",
        left: Any = "-",
        **extra: Any,
    ) -> None:
        entry = {
            "scenario": scenario,
            "detect_s": detect,
            "usable_s": usable,
            "steps_lost": lost,
            "processes_left": left,
            **extra,
        }
        self.rows.append(entry)
        print(json.dumps(entry), flush=True)

    def start(self, flags: str = "") -> None:
        self.magic("dist_cluster", f"start -n 2 --cpu {flags}")

    def stop(self) -> tuple[float, list[int], float]:
        pids = pids_of(self.cluster)
        t0 = time.perf_counter()
        self.magic("dist_cluster", "stop")
        took = time.perf_counter() - t0
        left, gone = wait_gone(pids, 15)
        return took, left, took + gone

    # scenarios ---------------------------------------------------------------------
    def raise_in_collective(self) -> None:
        self.cell("%%dist\nkept = rank")
        t0 = time.perf_counter()
        result = self.cell(
            "%%dist\nimport time\nif rank == 1:\n    time.sleep(0.2)\n    raise ValueError('x')\n"
            "t = torch.ones(1)\ndist.all_reduce(t)\n"
        )
        detect = time.perf_counter() - t0 - 0.2
        assert result.error_in_exec is not None
        usable = detect + self.reduce()
        self.row("rank raises in a collective", detect, usable)

    def sigkill_rank(self, auto: bool) -> None:
        before = self.cluster.ranks[1].pid
        t0 = time.perf_counter()
        result = self.cell("%%dist\n" + KILL_1_IN_LOOP)
        failed = time.perf_counter() - t0
        assert "SIGKILL" in str(result.error_in_exec)
        killed_after = 5 * 0.02  # the rank kills itself at its 6th step
        detect = failed - killed_after
        if not auto:
            t1 = time.perf_counter()
            self.magic("dist_cluster", "restart")
            usable = detect + time.perf_counter() - t1 + self.reduce()
        else:
            usable = detect + self.reduce()  # the cell returned after the auto-restart
        left, _ = wait_gone([before], 5)
        if auto:
            self.row(
                "rank SIGKILLed, --auto-restart",
                detect,
                usable,
                left=len(left),
                note="detect = until the cell failed, the replacement included",
            )
        else:
            self.row(
                "rank SIGKILLed, %dist_cluster restart",
                detect,
                usable,
                left=len(left),
                note="usable = detect + restart + a collective cell",
            )

    def hung_rank(self) -> None:
        from dist_notebook.cluster.onranks.execute import run_on_ranks

        errors: list[BaseException] = []

        def spin() -> None:
            code = (
                "import time\nif rank == 0:\n    end = time.time() + 60\n"
                "    while time.time() < end:\n        pass\n"
                "t = torch.ones(1)\ndist.all_reduce(t)\n"
            )
            try:
                run_on_ranks(self.cluster, code, timeout=5)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        worker = threading.Thread(target=spin)
        t_start = time.perf_counter()
        worker.start()
        time.sleep(1.0)
        t0 = time.perf_counter()
        self.magic("dist_cluster", "stacks")
        report = time.perf_counter() - t0
        worker.join()
        t_timeout = t_start + 5
        usable = time.perf_counter() - t_timeout + self.reduce()
        assert errors and isinstance(errors[0], TimeoutError)
        self.row(
            "hung rank: stacks report; --timeout 5 frees it",
            report,
            usable,
            note="detect = %dist_cluster stacks; usable = after the timeout expired",
        )

    def checkpoint_resume(self, root: Path) -> None:
        import torch

        ref = self.cell(
            f"%%dist_train --no-dashboard --checkpoint-every 5 --name ref "
            f"--checkpoint-dir {root}/ref\n" + CKPT_CELL.format(kill_rank=-1)
        )
        assert ref.error_in_exec is None, ref.error_in_exec
        reference = self.magic("dist_pull", f"{WEIGHTS} --all")
        t0 = time.perf_counter()
        self.cell(
            f"%%dist_train --no-dashboard --checkpoint-every 5 --name run "
            f"--checkpoint-dir {root}/run\n" + CKPT_CELL.format(kill_rank=1)
        )
        detect = time.perf_counter() - t0
        if self.cluster.state.value != "ready":
            self.magic("dist_cluster", "restart")
        res = self.cell(
            f"%%dist_train --no-dashboard --checkpoint-every 5 --name run --resume "
            f"--checkpoint-dir {root}/run\n" + CKPT_CELL.format(kill_rank=-1)
        )
        usable = time.perf_counter() - t0
        assert res.error_in_exec is None, res.error_in_exec
        first = self.magic("dist_pull", "first_step")
        resumed = self.magic("dist_pull", f"{WEIGHTS} --all")
        equal = all(torch.equal(v, resumed[r][k]) for r in (0, 1) for k, v in reference[r].items())
        self.row(
            "rank SIGKILLed at step 13, --checkpoint-every 5, --resume",
            detect,
            usable,
            lost=13 - first,
            weights_equal=equal,
            note="detect = the failing run's cell; usable = until the resumed run ended",
        )

    def interrupt(self) -> None:
        timer = threading.Timer(1.0, self.cluster.interrupt)
        timer.start()
        t0 = time.perf_counter()
        self.cell("%%dist\nimport time\ntime.sleep(60)\n")
        back = time.perf_counter() - t0 - 1.0
        self.row("interrupt during time.sleep(60)", back, back + self.reduce())

    def locked_store(self, store: str) -> None:
        holder = sqlite3.connect(store, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            t0 = time.perf_counter()
            res = self.cell(
                "%%dist_train --no-dashboard --name locked\n"
                "for s in range(5):\n    report(step=s, loss=1.0)\n"
            )
            took = time.perf_counter() - t0
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        last = self.ip.magics_manager.registry["TrainMagics"].last_result
        ok = res.error_in_exec is None and last.name == "locked" and last.state.value == "succeeded"
        self.row(
            "store locked during a 5-step run",
            None,
            took,
            lost=0 if ok else "run failed",
            note="usable = the run's wall time (it must succeed)",
        )

    def cycles(self, count: int) -> None:
        stops, totals, errors, left_total = [], [], 0, 0
        t0 = time.perf_counter()
        for _ in range(count):
            try:
                self.start()
                self.reduce()
                stop, left, gone = self.stop()
                stops.append(stop)
                totals.append(gone)
                left_total += len(left)
            except Exception as e:  # noqa: BLE001 - counted, reported
                errors += 1
                print(f"cycle failed: {e}", flush=True)
                if self.cluster is not None and self.cluster.state.value != "stopped":
                    self.cluster.stop_sync()
        wall = time.perf_counter() - t0
        stops.sort()
        self.row(
            f"{count} start/stop cycles",
            None,
            None,
            left=left_total,
            failures=errors,
            wall_s=wall,
            stop_median_s=stops[len(stops) // 2],
            stop_max_s=stops[-1],
            gone_max_s=max(totals),
            note="detect/usable: see stop times",
        )

    def stop_row(self) -> None:
        took, left, gone = self.stop()
        self.row("%dist_cluster stop", took, None, left=len(left), all_gone_s=gone)

    # kernels -----------------------------------------------------------------------
    def kernels(self, root: Path) -> None:
        from jupyter_client import KernelManager

        # The whole tree of the kernel (engines, nannies, controller, its schedulers) and
        # the cluster's files, as the kernel sees them.
        start = (
            "%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu\nimport json, psutil\n"
            "from dist_notebook.magics.session import Session\n"
            "from dist_notebook.cluster.reap import cluster_files\n"
            "_c = Session.for_shell(get_ipython()).cluster\n"
            "print('PIDS ' + json.dumps([[p.pid for p in psutil.Process().children(True)],"
            " cluster_files(_c.profile_dir, _c.engines.ipp_cluster_id) + [_c.stack_dir]]))\n"
        )

        def boot(store: str) -> tuple[Any, Any, list[int]]:
            km = KernelManager(kernel_name="python3")
            km.kernel_spec.argv[0] = sys.executable
            km.start_kernel(env=dict(os.environ, DIST_NOTEBOOK_STORE=store))
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=90)
            out: list[str] = []
            kc.execute_interactive(
                start,
                timeout=120,
                output_hook=lambda m: (
                    out.append(m["content"].get("text", "")) if m["msg_type"] == "stream" else None
                ),
            )
            line = next(x for x in "".join(out).splitlines() if x.startswith("PIDS "))
            return km, kc, json.loads(line[5:])

        stores = [str(root / f"k{i}.sqlite") for i in range(2)]
        booted: list[Any] = [None, None]
        threads = [
            threading.Thread(target=lambda i=i: booted.__setitem__(i, boot(stores[i])))
            for i in range(2)
        ]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        both = time.perf_counter() - t0
        (km_a, kc_a, (pids_a, files_a)), (km_b, kc_b, (pids_b, files_b)) = booted
        for kc in (kc_a, kc_b):
            reply = kc.execute_interactive("%%dist\n" + ALL_REDUCE, timeout=60)
            assert reply["content"]["status"] == "ok"
        self.row(
            "two kernels, a cluster each, at once",
            None,
            both,
            left="-",
            note="usable = both kernels started and their clusters ready",
        )

        kernel_a = km_a.provisioner.process.pid
        t0 = time.perf_counter()
        km_a.shutdown_kernel(now=False)  # returns once the kernel process has ended
        left, _ = wait_gone(pids_a + [kernel_a], 20)
        self.row(
            "kernel shutdown (KernelManager)",
            time.perf_counter() - t0,
            None,
            left=len(left),
            files=len([f for f in files_a if os.path.exists(f)]),
            note="detect = from the request until every process ended",
        )
        kc_a.stop_channels()

        kc_b.execute_interactive(
            "%%dist_train --name durable --background --no-dashboard\nimport time\n"
            "for step in range(100000):\n    report(step=step, loss=1.0)\n    time.sleep(0.02)\n",
            timeout=30,
        )
        time.sleep(4)
        killed_at = time.time()
        os.kill(km_b.provisioner.process.pid, signal.SIGKILL)
        left, gone = wait_gone(pids_b, 20)
        from dist_notebook.store import StoreReader

        reader = StoreReader(Path(stores[1]))
        run = reader.find_run("durable")
        newest = max(r["time"] for r in reader.metrics(run["id"]))
        self.row(
            "kernel SIGKILLed mid-run",
            gone,
            None,
            left=len(left),
            files=len([f for f in files_b if os.path.exists(f)]),
            newest_record_age_s=round(killed_at - newest, 3),
            note="detect = until every engine/controller ended; records lost: see age",
        )
        kc_b.stop_channels()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=5 if quick() else 50)
    args = parser.parse_args()
    use_scratch_store()
    store = os.environ["DIST_NOTEBOOK_STORE"]
    root = Path(tempfile.mkdtemp(prefix="dist-faults-"))
    os.chdir(root)
    b = Bench()
    b.start("--auto-restart")
    try:
        b.raise_in_collective()
        b.sigkill_rank(auto=True)
        b.hung_rank()
        b.interrupt()
        try:
            b.checkpoint_resume(root)
        except AssertionError as e:  # a row saying what failed, and the rest still runs
            b.row("rank SIGKILLed at step 13, --resume", None, None, note=f"failed: {e}"[:200])
            if b.cluster.state.value != "ready":
                b.magic("dist_cluster", "restart")
        b.locked_store(store)
    finally:
        b.stop_row()
    b.start()
    b.sigkill_rank(auto=False)
    b.stop()
    b.kernels(root)
    b.cycles(args.cycles)
    report(b, args.cycles)


def report(b: Bench, cycles: int) -> None:
    def fmt(v: Any) -> str:
        return f"{v:.2f} s" if isinstance(v, float) else ("-" if v is None else str(v))

    rows = [
        [
            r["scenario"],
            fmt(r["detect_s"]),
            fmt(r["usable_s"]),
            fmt(r["steps_lost"]),
            fmt(r["processes_left"]),
            fmt(r.get("files", "-")),
        ]
        for r in b.rows
    ]
    print()
    print(
        md_table(
            [
                "scenario",
                "time to detect",
                "time until usable",
                "lost",
                "processes left",
                "files left",
            ],
            rows,
        )
    )
    write_result("faults", {"rows": b.rows, "cycles": cycles})


if __name__ == "__main__":
    main()
