"""32 ranks over four test hosts (8 a host): the ssh launcher and Slurm, each start timed.

    sudo .venv/bin/python -m bench run scale_hosts [--reps 3] [--launchers ssh,slurm,local]
    sudo .venv/bin/python -m bench run scale_hosts --hosts 4 --per-host 8 --steps 20

Builds four test hosts as tests/multinode does (network namespaces with their own
address, hostname, PID namespace and sshd, or munged/slurmctld/slurmd; needs root; the
host builder is testbed/hosts.py, imported) and, for each launcher, ``--reps``
times:

- starts a ``DistCluster`` of hosts x per-host CPU ranks (one thread each) and times it
  to ready (``start_sync`` returns once the gloo group has done its check all_reduce);
  the cluster's own progress lines are time-stamped (controller, engines registered,
  group created) and printed as they come;
- checks the placement (per-host ranks on every host), runs one all_reduce on every
  rank (the sum is the world size), then a short training run through the training API
  (``TrainingRun``, what ``%%dist_train`` runs: a DDP loop reporting every step) and
  checks that every rank's records are in the run store, step by step;
- measures memory from /proc/<pid>/smaps_rollup: each rank's engine process with its
  children (found from the cluster's own rank pids, mapped into each host's PID
  namespace through the host's process tree, no process-list scan), PSS and USS, and
  the whole host's process tree against the same tree before the start (daemons only):
  what the ranks added, per rank;
- stops the cluster and waits (bounded) until no process but the host's own daemons is
  left on any host (Slurm: and no job in the queue).

``local`` (no root needed) is the same on this machine, engines forked from the fork
server: its memory is the server's tree after the start against the server alone
before it, per rank. At the end every host is torn down and this process's own process
tree is checked to be empty. Every wait has a bound; traffic goes to loopback and the
test hosts' addresses only. Writes ``bench/results/scale_hosts.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import common
from bench.common import fmt, md_table

# DDP over a 2-layer MLP, report() each step: the training tests' own cell.
from testbed.cells import TRAIN_CELL as TRAIN

ALL_REDUCE = (
    "import torch, torch.distributed as dist\n"
    "t = torch.ones(1)\n"
    "dist.all_reduce(t)\n"
    "assert int(t.item()) == dist.get_world_size(), t\n"
    "import dist_notebook\n"
    "_bench_code = dist_notebook.__file__\n"
)
# Slurm's nodes here have this machine's cores (2): 8 tasks a node need --overcommit,
# which Slurm (22.05) refuses beside --ntasks-per-node ("Requested node configuration is
# not available"); --ntasks with --nodes alone spreads them evenly (placement checked).
OVERCOMMIT = "#SBATCH --overcommit\n"
STOP_BOUND_S = 90.0
RUN_TIMEOUT_S = 300.0


def t_print(t0: float, what: str) -> None:
    print(f"[{time.monotonic() - t0:7.1f} s] {what}", flush=True)


# ---- memory ---------------------------------------------------------------------------------


def rollup(pid: int) -> dict[str, int]:
    """Rss, Pss and USS (private clean + dirty) of *pid* in bytes; {} if it is gone."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                    out[key] = int(rest.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return {}
    return {
        "rss": out.get("Rss", 0),
        "pss": out.get("Pss", 0),
        "uss": out.get("Private_Clean", 0) + out.get("Private_Dirty", 0),
    }


def tree_of(pid: int) -> list[int]:
    """*pid* and every process below it (a walk down from a pid we know)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root.pid, *(p.pid for p in root.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def summed(pids: list[int]) -> dict[str, int]:
    total = {"rss": 0, "pss": 0, "uss": 0}
    for pid in pids:
        for k, v in rollup(pid).items():
            total[k] += v
    return total


def inner_pid(pid: int) -> int | None:
    """The pid *pid* has in its own PID namespace (NSpid's last field)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return pid


def host_trees(hosts: Any) -> dict[str, list[int]]:
    """Each test host's whole process tree (machine pids), from its init's pid."""
    return {h.name: tree_of(h.init_pid) for h in hosts.hosts}


def rank_roots(cluster: Any, hosts: Any | None) -> dict[int, int]:
    """rank -> the machine pid of its engine process. A rank reports its pid as seen
    on its host (its own PID namespace): it is looked up in that host's tree."""
    if hosts is None:
        return {r.rank: r.pid for r in cluster.ranks}
    by_host: dict[str, dict[int, int]] = {}
    for name, pids in host_trees(hosts).items():
        by_host[name] = {inner: pid for pid in pids if (inner := inner_pid(pid)) is not None}
    return {r.rank: by_host[r.host][r.pid] for r in cluster.ranks if r.pid in by_host[r.host]}


def memory(
    cluster: Any, hosts: Any | None, before: dict[str, dict[str, int]], server_pid: int | None
) -> dict[str, Any]:
    roots = rank_roots(cluster, hosts)
    per_rank = {rank: summed(tree_of(pid)) for rank, pid in roots.items()}
    if hosts is not None:
        after = {name: summed(pids) for name, pids in host_trees(hosts).items()}
    else:
        assert server_pid is not None
        after = {"local": summed(tree_of(server_pid))}
    ranks_on = {name: 0 for name in after}
    for r in cluster.ranks:
        ranks_on[r.host if hosts is not None else "local"] += 1
    added = {
        name: {
            k: (after[name][k] - before[name][k]) / max(1, ranks_on[name])
            for k in ("rss", "pss", "uss")
        }
        for name in after
    }
    mib = 2**20

    def med(values: list[float]) -> float:
        return statistics.median(values) / mib if values else float("nan")

    return {
        "ranks_measured": len(per_rank),
        "rank_pss_mib": med([m["pss"] for m in per_rank.values()]),
        "rank_uss_mib": med([m["uss"] for m in per_rank.values()]),
        "rank_rss_mib": med([m["rss"] for m in per_rank.values()]),
        "host_added_pss_mib_per_rank": med([a["pss"] for a in added.values()]),
        "host_added_uss_mib_per_rank": med([a["uss"] for a in added.values()]),
        "per_host_added_pss_mib_per_rank": {n: a["pss"] / mib for n, a in added.items()},
        "before_mib": {n: {k: v / mib for k, v in b.items()} for n, b in before.items()},
        "after_mib": {n: {k: v / mib for k, v in a.items()} for n, a in after.items()},
    }


# ---- one start ------------------------------------------------------------------------------


def spec_for(kind: str, hosts: Any | None, n_hosts: int, per_host: int) -> Any:
    from dist_notebook import ClusterSpec
    from dist_notebook.cluster.launchers import RankSlurmEngineSetLauncher

    n = n_hosts * per_host
    # Starts of 32 full engines on 2 cores take minutes: every bound is generous.
    bounds: dict[str, Any] = {"threads": 1, "start_timeout": 600.0, "timeout": 300.0}
    if kind == "local":
        return ClusterSpec(n=n, **bounds)
    assert hosts is not None
    # The hosts' engines import this checkout's code, as the kernel does.
    bounds["extra_engine_env"] = {"PYTHONPATH": str(common.ROOT)}
    if kind == "ssh":
        layout = tuple((h.name, per_host) for h in hosts.hosts)
        return ClusterSpec(n=n, launcher="ssh", hosts=layout, ip=hosts.gateway, **bounds)
    template = RankSlurmEngineSetLauncher.default_template.default_value
    template = template.replace("{tasks_line}\n", "").replace("srun ", OVERCOMMIT + "srun ", 1)
    return ClusterSpec(
        n=n,
        launcher="slurm",
        nodes=n_hosts,
        partition="test",
        time_limit="30",
        ip=hosts.gateway,
        launcher_config={"batch_template": template},
        **bounds,
    )


def wait_until(what: str, ok: Callable[[], Any], timeout: float) -> float:
    t0 = time.monotonic()
    while not ok():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.2)
    return time.monotonic() - t0


def all_reduce(cluster: Any, timeout: float = 180.0) -> float:
    t0 = time.perf_counter()
    ar = cluster.client[cluster.engine_ids()].execute(ALL_REDUCE, block=False)
    if not ar.wait(timeout):
        raise TimeoutError(f"the all_reduce did not finish within {timeout:.0f} s")
    ar.get()  # raises the ranks' errors
    took = time.perf_counter() - t0
    # Every rank runs the code this bench is part of (not another checkout's).
    paths = set(cluster.client[cluster.engine_ids()].pull("_bench_code", block=True))
    if paths != {str(common.ROOT / "dist_notebook" / "__init__.py")}:
        raise RuntimeError(f"the ranks import dist_notebook from {paths}, not {common.ROOT}")
    return took


def train(cluster: Any, name: str, steps: int) -> dict[str, Any]:
    from dist_notebook import load_run
    from dist_notebook.training import RunSpec, TrainingRun

    t0 = time.perf_counter()
    run = TrainingRun(
        cluster,
        RunSpec(code=TRAIN.format(steps=steps), name=name, steps=steps, timeout=RUN_TIMEOUT_S),
        writer=cluster.writer(),
    )
    result = run.run()
    took = time.perf_counter() - t0
    if result.state.value != "succeeded":
        raise RuntimeError(f"the training run {name} ended {result.state.value}: {result.error}")
    records = load_run(name).records()
    steps_of: dict[int, list[int]] = {}
    for rec in records:
        steps_of.setdefault(rec.rank, []).append(rec.step)
    want = list(range(steps))
    complete = [r for r in range(cluster.n) if sorted(steps_of.get(r, [])) == want]
    if len(complete) != cluster.n:
        missing = sorted(set(range(cluster.n)) - set(complete))
        raise RuntimeError(f"run {name}: ranks {missing} lack records of steps 0..{steps - 1}")
    return {"seconds": took, "records": len(records), "ranks_complete": len(complete)}


def left_on_hosts(hosts: Any) -> dict[str, list[str]]:
    out = {}
    for h in hosts.hosts:
        procs = h.processes()
        if procs:
            out[h.name] = [" ".join(p.cmdline())[:60] for p in procs]
    return out


@contextlib.contextmanager
def launches_timed(t0: list[float], out: list[tuple[float, float]]) -> Iterator[None]:
    """Time each engine launcher's start (a fork request, an ssh round trip, an sbatch):
    (began, returned) in seconds from *t0*[0]; they run one after another."""
    from dist_notebook.cluster import launchers

    classes = (
        launchers.RankEngineLauncher,
        launchers.RankSSHEngineLauncher,
        launchers.RankSlurmEngineSetLauncher,
    )
    originals = {cls: cls.__dict__.get("start") for cls in classes}

    def timed(original: Any) -> Any:
        def start(self: Any, *a: Any, **k: Any) -> Any:
            began = time.monotonic() - t0[0]
            try:
                return original(self, *a, **k)
            finally:
                out.append((round(began, 3), round(time.monotonic() - t0[0], 3)))

        return start

    for cls in classes:
        cls.start = timed(cls.start)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for cls, original in originals.items():
            if original is None:
                del cls.start  # the inherited one again
            else:
                cls.start = original  # type: ignore[method-assign]


def one_start(
    kind: str, hosts: Any | None, args: argparse.Namespace, rep: int, t_bench: float
) -> dict[str, Any]:
    from dist_notebook import DistCluster

    n = args.hosts * args.per_host
    server_pid = None
    if hosts is not None:
        before = {name: summed(pids) for name, pids in host_trees(hosts).items()}
    else:
        from dist_notebook.cluster import forkserver

        server = forkserver.prestart()
        if server is None or not server.wait_ready(300):
            raise RuntimeError("the fork server did not start")
        server_pid = server.pid
        before = {"local": summed(tree_of(server_pid))}
    phases: list[tuple[float, str]] = []
    launched: list[tuple[float, float]] = []
    t0 = time.monotonic()
    t0_box = [t0]

    def progress(what: str) -> None:
        at = time.monotonic() - t0
        phases.append((round(at, 3), what))
        # The count of registered engines: every 8th and the last, not each one.
        if what.startswith("engines registered"):
            seen = int(what.split()[-1].split("/")[0])
            if seen % args.per_host and seen != n:
                return
        t_print(t_bench, f"{kind} rep {rep + 1}: {what} ({at:.1f} s)")

    cluster = DistCluster(spec_for(kind, hosts, args.hosts, args.per_host), progress=progress)
    out: dict[str, Any] = {"rep": rep, "load_before": list(os.getloadavg())}
    try:
        with launches_timed(t0_box, launched):
            cluster.start_sync()
        out["start_s"] = time.monotonic() - t0
        out["launches"] = launched
        if launched:
            t_print(
                t_bench,
                f"{kind} rep {rep + 1}: {len(launched)} launcher start(s), one after another, "
                f"{launched[0][0]:.1f}-{launched[-1][1]:.1f} s",
            )
        out["start_seconds_cluster"] = cluster.start_seconds
        out["phases"] = phases
        t_print(t_bench, f"{kind} rep {rep + 1}: ready in {out['start_s']:.1f} s")
        if hosts is not None:
            placed = {h.name: sum(r.host == h.name for r in cluster.ranks) for h in hosts.hosts}
            if set(placed.values()) != {args.per_host}:
                raise RuntimeError(f"ranks per host {placed}, not {args.per_host} on each")
            out["placed"] = placed
        out["all_reduce_s"] = all_reduce(cluster)
        t_print(t_bench, f"{kind} rep {rep + 1}: all_reduce on {n} ranks done")
        out["train"] = train(cluster, f"hosts-{kind}-{rep}-{os.getpid()}", args.steps)
        t_print(
            t_bench,
            f"{kind} rep {rep + 1}: run of {args.steps} steps, "
            f"{out['train']['records']} records of {out['train']['ranks_complete']} ranks stored",
        )
        out["memory"] = memory(cluster, hosts, before, server_pid)
        m = out["memory"]
        t_print(
            t_bench,
            f"{kind} rep {rep + 1}: memory a rank adds (host tree) PSS "
            f"{m['host_added_pss_mib_per_rank']:.0f} MiB; a rank's engine PSS "
            f"{m['rank_pss_mib']:.0f} / USS {m['rank_uss_mib']:.0f} MiB",
        )
    finally:
        t1 = time.monotonic()
        cluster.stop_sync()
        if hosts is not None:
            wait_until(
                f"nothing left on the hosts {left_on_hosts(hosts)}",
                lambda: not left_on_hosts(hosts),
                STOP_BOUND_S,
            )
            if kind == "slurm":
                from testbed.slurm import jobs

                conf = hosts.slurm_conf
                wait_until("no Slurm job left", lambda: not jobs(conf), STOP_BOUND_S)
        else:
            from dist_notebook.cluster import forkserver

            wait_until(
                "the fork server's engines end",
                lambda: not tree_of(server_pid or 0)[1:],
                STOP_BOUND_S,
            )
        out["stop_to_empty_s"] = time.monotonic() - t1
        t_print(
            t_bench, f"{kind} rep {rep + 1}: stopped, nothing left ({out['stop_to_empty_s']:.1f} s)"
        )
    out["load_after"] = list(os.getloadavg())
    return out


# ---- hosts per launcher ---------------------------------------------------------------------


def run_kind(kind: str, args: argparse.Namespace, t_bench: float) -> list[dict[str, Any]]:
    from testbed.hosts import TestHosts, why_not

    if kind == "local":
        return [one_start(kind, None, args, rep, t_bench) for rep in range(args.reps)]
    reason = why_not(kind)
    if reason:
        raise SystemExit(f"bench scale_hosts: {reason}")
    tmp = Path(tempfile.mkdtemp(prefix=f"dist-bench-{kind}-hosts-"))
    t_print(t_bench, f"{kind}: building {args.hosts} test hosts")
    hosts = TestHosts(tmp, args.hosts).up()
    munged = None
    saved = {k: os.environ.get(k) for k in ("DIST_NOTEBOOK_SSH_CONFIG", "SLURM_CONF")}
    try:
        if kind == "ssh":
            from testbed.sshd import start_sshd

            os.environ["DIST_NOTEBOOK_SSH_CONFIG"] = str(start_sshd(hosts))
        else:
            from testbed.slurm import start_slurm

            hosts.slurm_conf, munged = start_slurm(hosts)  # type: ignore[attr-defined]
            os.environ["SLURM_CONF"] = str(hosts.slurm_conf)  # type: ignore[attr-defined]
        t_print(t_bench, f"{kind}: hosts up ({', '.join(h.address for h in hosts.hosts)})")
        return [one_start(kind, hosts, args, rep, t_bench) for rep in range(args.reps)]
    finally:
        hosts.down()
        if munged is not None:
            munged.terminate()
            munged.wait(10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        inits = [h.init for h in hosts.hosts if h.init is not None]
        if any(p.poll() is None for p in inits):
            raise RuntimeError(f"{kind}: a test host's init outlived its teardown")
        t_print(t_bench, f"{kind}: hosts torn down")


def own_tree_left() -> list[str]:
    """This process's children still running (the fork server closed first)."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {' '.join(p.cmdline())[:60]}")
        except psutil.NoSuchProcess:
            continue
    return out


# ---- report ---------------------------------------------------------------------------------


def spread(values: list[float], digits: int = 1) -> str:
    if not values:
        return "-"
    return (
        f"{fmt(statistics.median(values), digits)} "
        f"({fmt(min(values), digits)}-{fmt(max(values), digits)})"
    )


def phase_at(phases: list[list[Any]], prefix: str, last: bool = False) -> float | None:
    """When the first (or last) progress line starting with *prefix* came; for the
    registration count, the first line that counts one engine or more."""
    hits = [at for at, what in phases if what.startswith(prefix) and " 0/" not in what]
    if not hits:
        return None
    return float(hits[-1] if last else hits[0])


def table(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    rows = []
    for kind, reps in results.items():
        ok = [r for r in reps if "start_s" in r]
        mem = [r["memory"] for r in ok if "memory" in r]
        ph = [r.get("phases", []) for r in ok]
        reg_first = [x for p in ph if (x := phase_at(p, "engines registered")) is not None]
        reg_last = [x for p in ph if (x := phase_at(p, "engines registered", True)) is not None]
        group = [
            r["start_s"] - x
            for r, p in zip(ok, ph, strict=True)
            if (x := phase_at(p, "creating the")) is not None
        ]
        launched = [r["launches"][-1][1] for r in ok if r.get("launches")]
        where = "this machine" if kind == "local" else f"{args.hosts} test hosts"
        rows.append(
            [
                f"{kind} ({where}, {args.hosts * args.per_host} ranks)",
                f"{len(ok)}/{len(reps)}",
                spread([r["start_s"] for r in ok]),
                spread(launched),
                spread(reg_first),
                spread(reg_last),
                spread(group),
                spread([r["all_reduce_s"] for r in ok], 2),
                spread([r["train"]["seconds"] for r in ok]),
                ", ".join(f"{r['train']['records']}" for r in ok),
                spread([m["host_added_pss_mib_per_rank"] for m in mem], 0),
                spread([m["host_added_uss_mib_per_rank"] for m in mem], 0),
                spread([m["rank_pss_mib"] for m in mem], 0),
                spread([m["rank_uss_mib"] for m in mem], 0),
                spread([r["stop_to_empty_s"] for r in ok]),
            ]
        )
    head = [
        f"launcher ({args.reps} reps: median (min-max))",
        "starts ok",
        "start to ready (s)",
        "last engine launched (s)",
        "first engine seen (s)",
        "last engine seen (s)",
        "group creation (s)",
        "first all_reduce (s)",
        f"{args.steps}-step run (s)",
        "records stored",
        "memory a rank adds, PSS (MiB)",
        "the same, USS (MiB)",
        "a rank's engine PSS (MiB)",
        "a rank's engine USS (MiB)",
        "stop to nothing left (s)",
    ]
    return md_table(head, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--launchers", default="ssh,slurm")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--per-host", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--limit", type=float, default=3600.0, help="end the bench (and its hosts) after this"
    )
    args = parser.parse_args()
    # The last bound: a wait that hangs past it ends the process, and the hosts with it
    # (their init dies with its parent).
    faulthandler.dump_traceback_later(args.limit, exit=True)
    common.stop_on_signals()
    common.use_scratch_store()
    t_bench = time.monotonic()
    results: dict[str, list[dict[str, Any]]] = {}
    failed: dict[str, str] = {}
    for kind in args.launchers.split(","):
        try:
            results[kind] = run_kind(kind, args, t_bench)
        except Exception as e:
            failed[kind] = f"{type(e).__name__}: {e}"
            t_print(t_bench, f"{kind}: FAILED {failed[kind]}")
    from dist_notebook.cluster import forkserver

    forkserver.close()
    left = own_tree_left()
    t_print(t_bench, f"after teardown, processes left under this bench: {left or 'none'}")
    text = table(results, args)
    print(text, flush=True)
    for kind, why in failed.items():
        print(f"{kind}: failed: {why}", flush=True)
    command = "sudo .venv/bin/python -m bench run scale_hosts " + " ".join(sys.argv[1:])
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    md = f"`{command.strip()}` ({stamp}, load at the end {load})\n\n{text}\n"
    if failed:
        md += "\n" + "\n".join(f"- {k}: failed: {v}" for k, v in failed.items()) + "\n"
    md += f"\nProcesses left after teardown: {left or 'none'}\n"
    (common.RESULTS / "scale_hosts.md").write_text(md)
    common.write_result(
        "scale_hosts",
        {
            "command": command,
            "hosts": args.hosts,
            "per_host": args.per_host,
            "reps": args.reps,
            "steps": args.steps,
            "raw": results,
            "failed": failed,
            "left_after_teardown": left,
            "table": text,
        },
    )
    faulthandler.cancel_dump_traceback_later()
    if failed or left:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
