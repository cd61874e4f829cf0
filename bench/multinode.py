"""Two test hosts: our SSH cluster vs ``torchrun --nnodes 2 --rdzv-backend c10d``.

    sudo .venv/bin/python -m bench run multinode [--reps 3] [--steps 300]

Builds two test hosts (network namespaces with their own address, hostname and sshd, as
tests/multinode does; needs root) and measures, interleaved, on one CPU rank per host:

- start to first collective: from the launch to the first all_reduce done on every rank
  (ours: ``DistCluster.start`` over ssh, which ends with the group's check all_reduce;
  torchrun: one agent per host started in that host's namespaces, c10d rendezvous on
  h1, the script's ``init_process_group`` and one all_reduce);
- DDP throughput: the same training code (a 64-256-256-10 MLP, batch 64 per rank,
  synthetic data, gloo) timed on rank 0 between barriers after a warm-up, with the
  median time of one step beside it (less swayed by the machine's hiccups than the mean).

A third side, "plain", is the control: the very script torchrun runs, started on each
host over the same ssh as our engines, with the variables our ranks get (MASTER_ADDR,
RANK, ...) and nothing else: no engine, kernel or controller, and no torchrun agent. Where
ours trails torchrun and plain trails it as much, the gap is not in dist-notebook.

Every side runs with one thread a rank and gloo on the hosts' eth0 (torchrun and plain
are given GLOO_SOCKET_IFNAME=eth0; our ranks get it from the probe). Writes
``bench/results/multinode.json`` and prints the table.

    sudo .venv/bin/python -m bench run multinode --scale [--reps 3]

times ``%dist_cluster scale`` instead, on each launcher (ssh, mpi, Slurm where the test
hosts can run them): a cluster of 2 hosts x 1 rank grows to 2 x 2 and shrinks back,
``--reps`` times; each time is until the new group has done its first collective
(``scale`` returns then). Writes ``bench/results/multinode_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.common import PY, fmt, md_table

TRAIN = """
def make_trainer(batch=64):
    import time, torch, torch.nn as nn, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                              nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(dist.get_rank())
    xs = torch.randn(32, batch, 64, generator=gen)
    ys = torch.randint(0, 10, (32, batch), generator=gen)
    def step(i):
        loss = nn.functional.cross_entropy(model(xs[i % 32]), ys[i % 32])
        opt.zero_grad(); loss.backward(); opt.step()
    def run(steps, warmup=0):
        for i in range(warmup):
            step(i)
        if not steps:
            return {}
        dist.barrier()
        t0 = time.perf_counter()
        ends = []
        for i in range(steps):
            step(i)
            ends.append(time.perf_counter())
        dist.barrier()
        took = time.perf_counter() - t0
        each = sorted(b - a for a, b in zip([t0] + ends[:-1], ends))
        return {"samples_per_s": steps * batch * dist.get_world_size() / took,
                "step_ms_p50": each[len(each) // 2] * 1e3}
    return run

def bench_train(steps, warmup=20):
    return make_trainer()(steps, warmup)
"""

SCRIPT = (
    textwrap.dedent(
        """
    import json, sys, time
    import torch, torch.distributed as dist
    t0 = float(sys.argv[1])
    dist.init_process_group("gloo")
    x = torch.ones(1)
    dist.all_reduce(x)
    first = time.time() - t0
    """
    )
    + TRAIN
    + textwrap.dedent(
        """
    result = bench_train(int(sys.argv[2]))
    if dist.get_rank() == 0:
        print("BENCH_RESULT " + json.dumps({"first_s": first, **result}), flush=True)
    dist.destroy_process_group()
    """
    )
)


def free_port_on(host: Any) -> int:
    # Asked inside h1's own network namespace, where nothing else runs.
    code = "import socket; s=socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
    return int(host.exec(PY, "-c", code).stdout.strip())


def hosts_and_script(text: str) -> tuple[Any, Path]:
    """Two test hosts up (exits with the reason where they cannot be built here), a
    scratch run store, and *text* written as the script torchrun and plain run."""
    from testbed.hosts import TestHosts, why_not

    reason = why_not("ssh")
    if reason:
        sys.exit(f"{Path(sys.argv[0]).name}: {reason}")
    common.use_scratch_store()
    tmp = Path(tempfile.mkdtemp(prefix="dist-bench-hosts-"))
    script = tmp / "train.py"
    script.write_text(text)
    return TestHosts(tmp).up(), script


def torchrun_procs(hosts: Any, script: Path, args: list[str], port: int) -> list[subprocess.Popen]:
    """One torchrun agent per host, in that host's namespaces, c10d rendezvous on h1:port."""
    h1 = hosts.hosts[0]
    endpoint = f"{h1.address}:{port}"
    env = common.child_env(threads=1, GLOO_SOCKET_IFNAME="eth0")
    rdzv_id = f"bench{time.time_ns()}"
    cmd = ["-m", "torch.distributed.run", "--nnodes", str(len(hosts.hosts))]
    cmd += ["--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint]
    cmd += ["--rdzv-id", rdzv_id, str(script), *args]
    return [
        subprocess.Popen(
            [*h.enter(), PY, *cmd],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for h in hosts.hosts
    ]


def plain_procs(
    hosts: Any, script: Path, args: list[str], port: int, ssh_config: str
) -> list[subprocess.Popen]:
    """The control: *script* started over ssh on each host, with the variables our ranks
    get (rank 0's store on h1:port) and no launcher around it."""
    h1 = hosts.hosts[0]
    procs = []
    for rank, host in enumerate(hosts.hosts):
        env = {
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "eth0",
            "MASTER_ADDR": h1.address,
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": str(len(hosts.hosts)),
        }
        assign = " ".join(f"{k}={v}" for k, v in env.items())
        command = f"env {assign} {PY} -u {script} {' '.join(args)}"
        procs.append(
            subprocess.Popen(
                ["ssh", "-F", ssh_config, host.name, "--", command],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def wait_result(procs: list[subprocess.Popen], what: str, timeout: float = 120) -> dict:
    """The BENCH_RESULT of *procs*' output; {} when they hang (killed, counted as such)."""
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    except subprocess.TimeoutExpired:
        # torchrun's c10d rendezvous can hang when one agent leaves early: a failed run
        # of the peer, counted as such, not a hung bench.
        for p in procs:
            p.kill()
        tails = [(p.communicate()[0] or "")[-400:] for p in procs]
        print(f"{what} hung ({timeout:.0f} s); last output:", *tails, sep="\n", flush=True)
        return {}
    return common.result_line("\n".join(outs))


def run_torchrun(hosts: Any, script: Path, steps: int) -> dict[str, float]:
    port = free_port_on(hosts.hosts[0])
    t0 = time.time()
    procs = torchrun_procs(hosts, script, [repr(t0), str(steps)], port)
    return wait_result(procs, "torchrun")


def run_plain(hosts: Any, script: Path, steps: int, ssh_config: str) -> dict[str, float]:
    port = free_port_on(hosts.hosts[0])
    t0 = time.time()
    procs = plain_procs(hosts, script, [repr(t0), str(steps)], port, ssh_config)
    return wait_result(procs, "plain run")


def run_ours(hosts: Any, steps: int) -> dict[str, float]:
    from dist_notebook import ClusterSpec, DistCluster
    from dist_notebook.cluster.onranks.execute import apply_on_ranks, run_on_ranks

    spec = ClusterSpec(
        n=2, launcher="ssh", hosts=(("h1", 1), ("h2", 1)), ip=hosts.gateway, threads=1
    )
    t0 = time.time()
    cluster = DistCluster(spec)
    try:
        cluster.start_sync()  # ends with the group's check all_reduce on every rank
        first = time.time() - t0
        run_on_ranks(cluster, TRAIN)
        values = apply_on_ranks(cluster, _call_bench, steps)
        return {"first_s": first, **values[0].value}
    finally:
        cluster.stop_sync()


def _call_bench(steps: int) -> dict[str, float]:
    from IPython import get_ipython

    return dict(get_ipython().user_ns["bench_train"](steps))


def run_scale(kind: str, hosts: Any, reps: int) -> dict[str, list[float]]:
    """Grow 2 -> 4 ranks and shrink back, *reps* times, on one cluster of *kind*."""
    from dist_notebook import ClusterSpec, DistCluster
    from dist_notebook.cluster.scale import scale_sync

    where: dict[str, Any] = {"nodes": 2} if kind == "slurm" else {"hosts": (("h1", 1), ("h2", 1))}
    spec = ClusterSpec(n=2, launcher=kind, ip=hosts.gateway, threads=1, **where)
    cluster = DistCluster(spec)
    times: dict[str, list[float]] = {"start": [], "grow 2->4": [], "shrink 4->2": []}
    try:
        cluster.start_sync()
        times["start"].append(cluster.start_seconds or 0.0)
        for _ in range(reps):
            times["grow 2->4"].append(scale_sync(cluster, 4))
            assert sorted(r.host for r in cluster.ranks) == ["h1", "h1", "h2", "h2"]
            times["shrink 4->2"].append(scale_sync(cluster, 2))
            assert [r.host for r in cluster.ranks] == ["h1", "h2"]
    finally:
        cluster.stop_sync()
    print(kind, json.dumps(times), flush=True)
    return times


def main_scale(reps: int) -> None:
    from testbed.hosts import TestHosts, why_not
    from testbed.slurm import start_slurm
    from testbed.sshd import start_sshd

    common.use_scratch_store()
    results: dict[str, dict[str, list[float]]] = {}
    skipped: dict[str, str] = {}
    reason = why_not("ssh")
    if reason:
        sys.exit(f"bench multinode: {reason}")
    hosts = TestHosts(Path(tempfile.mkdtemp(prefix="dist-bench-hosts-"))).up()
    try:
        os.environ["DIST_NOTEBOOK_SSH_CONFIG"] = str(start_sshd(hosts))
        for kind in ("ssh", "mpi"):
            reason = why_not(kind)
            if reason:
                skipped[kind] = reason
                continue
            results[kind] = run_scale(kind, hosts, reps)
    finally:
        hosts.down()
    reason = why_not("slurm")
    if reason:
        skipped["slurm"] = reason
    else:
        hosts = TestHosts(Path(tempfile.mkdtemp(prefix="dist-bench-slurm-"))).up()
        munged = None
        try:
            conf, munged = start_slurm(hosts)
            os.environ["SLURM_CONF"] = str(conf)
            results["slurm"] = run_scale("slurm", hosts, reps)
        finally:
            hosts.down()
            if munged is not None:
                munged.terminate()
                munged.wait(10)
    rows = []
    for kind, times in results.items():
        for what in ("grow 2->4", "shrink 4->2"):
            vals = times[what]
            spread = f"{min(vals):.2f}-{max(vals):.2f}"
            rows.append([kind, what, fmt(statistics.median(vals), 2), spread])
    table = md_table([f"launcher ({reps} reps)", "scale", "median (s)", "min-max (s)"], rows)
    print(table)
    for kind, why in skipped.items():
        print(f"{kind}: skipped ({why})")
    common.write_result(
        "multinode_scale",
        {"reps": reps, "raw": results, "skipped": skipped, "table": table, **_load()},
    )


def _load() -> dict[str, Any]:
    return {"loadavg": list(os.getloadavg()), "cpus": os.cpu_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1 if common.quick() else 3)
    parser.add_argument("--steps", type=int, default=60 if common.quick() else 300)
    parser.add_argument("--scale", action="store_true", help="time scale on each launcher")
    args = parser.parse_args()
    if args.scale:
        main_scale(args.reps)
        return
    from testbed.sshd import start_sshd

    hosts, script = hosts_and_script(SCRIPT)
    results: dict[str, list[dict[str, float]]] = {"dist-notebook": [], "torchrun": [], "plain": []}
    hung: dict[str, int] = {}
    try:
        ssh_config = str(start_sshd(hosts))
        os.environ["DIST_NOTEBOOK_SSH_CONFIG"] = ssh_config
        for rep in range(args.reps):
            for side in common.interleave(list(results), rep):
                if side == "torchrun":
                    value = run_torchrun(hosts, script, args.steps)
                elif side == "plain":
                    value = run_plain(hosts, script, args.steps, ssh_config)
                else:
                    value = run_ours(hosts, args.steps)
                print(side, json.dumps(value), flush=True)
                results[side].append(value)  # {} for a hung run: reps stay aligned
                if not value:
                    hung[side] = hung.get(side, 0) + 1
    finally:
        hosts.down()
    for side, count in hung.items():
        print(f"{side}: {count} of {args.reps} runs hung and are left out", flush=True)
    report(results, args, hung)


KEYS = (
    ("start to first collective (s)", "first_s", 2),
    ("DDP samples/s (2 hosts x 1 CPU rank)", "samples_per_s", 0),
    ("median step (ms)", "step_ms_p50", 3),
)


def report(results: dict[str, list[dict[str, float]]], args: Any, hung: dict[str, int]) -> None:
    sides = list(results)

    def values(side: str, key: str) -> list[float]:
        return [v[key] for v in results[side] if v]

    rows = []
    for what, key, digits in KEYS:
        row = [what]
        for side in sides:
            vals = values(side, key)
            row.append(
                f"{fmt(statistics.median(vals), digits)} ({fmt(min(vals), digits)}-"
                f"{fmt(max(vals), digits)})"
            )
        ours, theirs = (statistics.median(values(s, key)) for s in ("dist-notebook", "torchrun"))
        rows.append([*row, fmt(ours / theirs, 3) + "x"])
    # Each rep ran every side back to back: a ratio within a rep cancels the drift of the
    # machine's load between reps, which the ratio of medians does not.
    pairs: dict[str, list[float]] = {}
    for a, b in (("dist-notebook", "torchrun"), ("plain", "torchrun"), ("dist-notebook", "plain")):
        ratios = [
            x["samples_per_s"] / y["samples_per_s"]
            for x, y in zip(results[a], results[b], strict=True)
            if x and y
        ]
        pairs[f"{a} / {b}"] = ratios
        spread = f"{fmt(min(ratios), 3)}-{fmt(max(ratios), 3)}"
        rows.append(
            [f"samples/s within each rep, {a} / {b}"]
            + [""] * len(sides)
            + [f"{fmt(statistics.median(ratios), 3)}x ({spread})"]
        )
    head = [f"{args.reps} reps, interleaved: median (min-max)"]
    head += ["dist-notebook (ssh)", "torchrun c10d", "plain script over ssh"][: len(sides)]
    table = md_table([*head, "dist-notebook / torchrun"], rows)
    print(table)
    common.write_result(
        "multinode",
        {
            "reps": args.reps,
            "steps": args.steps,
            "raw": results,
            "hung": hung,
            "paired_ratios": pairs,
            "table": table,
            **_load(),
        },
    )


if __name__ == "__main__":
    main()
