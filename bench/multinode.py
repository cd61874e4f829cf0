"""Two test hosts: our SSH cluster vs ``torchrun --nnodes 2 --rdzv-backend c10d``.

    sudo .venv/bin/python bench/multinode.py [--reps 3] [--steps 300]

Builds two test hosts (network namespaces with their own address, hostname and sshd, as
tests/multinode does; needs root) and measures, interleaved, on one CPU rank per host:

- start to first collective: from the launch to the first all_reduce done on every rank
  (ours: ``DistCluster.start`` over ssh, which ends with the group's check all_reduce;
  torchrun: one agent per host started in that host's namespaces, c10d rendezvous on
  h1, the script's ``init_process_group`` and one all_reduce);
- DDP throughput: the same training code (a 64-256-256-10 MLP, batch 64 per rank,
  synthetic data, gloo) timed on rank 0 between barriers after a warm-up.

Both sides run with one thread a rank and gloo on the hosts' eth0 (torchrun is given
GLOO_SOCKET_IFNAME=eth0; our ranks get it from the probe). Writes
``bench/results/multinode.json`` and prints the table.

    sudo .venv/bin/python bench/multinode.py --scale [--reps 3]

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
from common import PY, fmt, md_table  # noqa: E402

TRAIN = """
def bench_train(steps, warmup=20, batch=64):
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
    for i in range(warmup):
        step(i)
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    dist.barrier()
    took = time.perf_counter() - t0
    return steps * batch * dist.get_world_size() / took
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
    sps = bench_train(int(sys.argv[2]))
    if dist.get_rank() == 0:
        print("BENCH_RESULT " + json.dumps({"first_s": first, "samples_per_s": sps}), flush=True)
    dist.destroy_process_group()
    """
    )
)


def free_port_on(host: Any) -> int:
    # Asked inside h1's own network namespace, where nothing else runs.
    code = "import socket; s=socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
    return int(host.exec(PY, "-c", code).stdout.strip())


def run_torchrun(hosts: Any, script: Path, steps: int) -> dict[str, float]:
    h1 = hosts.hosts[0]
    endpoint = f"{h1.address}:{free_port_on(h1)}"
    env = common.child_env(threads=1, GLOO_SOCKET_IFNAME="eth0")
    t0 = time.time()
    procs = [
        subprocess.Popen(
            [
                *h.enter(),
                PY,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                endpoint,
                "--rdzv-id",
                f"bench{int(t0)}",
                str(script),
                repr(t0),
                str(steps),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for h in hosts.hosts
    ]
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    except subprocess.TimeoutExpired:
        # torchrun's c10d rendezvous can hang when one agent leaves early: a failed run
        # of the peer, counted as such, not a hung bench.
        for p in procs:
            p.kill()
        tails = [(p.communicate()[0] or "")[-400:] for p in procs]
        print("torchrun hung (120 s); agents' last output:", *tails, sep="\n", flush=True)
        return {}
    return common.result_line("\n".join(outs))


def run_ours(hosts: Any, steps: int) -> dict[str, float]:
    from dist_notebook import ClusterSpec, DistCluster
    from dist_notebook.cluster.execute import apply_on_ranks, run_on_ranks

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
        return {"first_s": first, "samples_per_s": values[0].value}
    finally:
        cluster.stop_sync()


def _call_bench(steps: int) -> float:
    from IPython import get_ipython

    return float(get_ipython().user_ns["bench_train"](steps))


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
    from tests.multinode.slurm import start_slurm
    from tests.multinode.sshd import start_sshd
    from tests.multinode.testhosts import TestHosts, why_not

    common.use_scratch_store()
    results: dict[str, dict[str, list[float]]] = {}
    skipped: dict[str, str] = {}
    reason = why_not("ssh")
    if reason:
        sys.exit(f"bench/multinode.py: {reason}")
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
    from tests.multinode.sshd import start_sshd
    from tests.multinode.testhosts import TestHosts, why_not

    reason = why_not("ssh")
    if reason:
        sys.exit(f"bench/multinode.py: {reason}")
    common.use_scratch_store()
    tmp = Path(tempfile.mkdtemp(prefix="dist-bench-hosts-"))
    script = tmp / "torchrun_train.py"
    script.write_text(SCRIPT)
    hosts = TestHosts(tmp).up()
    results: dict[str, list[dict[str, float]]] = {"dist-notebook": [], "torchrun": []}
    hung: dict[str, int] = {}
    try:
        os.environ["DIST_NOTEBOOK_SSH_CONFIG"] = str(start_sshd(hosts))
        for rep in range(args.reps):
            for side in common.interleave(list(results), rep):
                if side == "torchrun":
                    value = run_torchrun(hosts, script, args.steps)
                else:
                    value = run_ours(hosts, args.steps)
                print(side, json.dumps(value), flush=True)
                if value:
                    results[side].append(value)
                else:
                    hung[side] = hung.get(side, 0) + 1
    finally:
        hosts.down()
    for side, count in hung.items():
        print(f"{side}: {count} of {args.reps} runs hung and are left out", flush=True)
    report(results, args, hung)


def report(results: dict[str, list[dict[str, float]]], args: Any, hung: dict[str, int]) -> None:
    med = {
        side: {k: statistics.median(v[k] for v in vals) for k in ("first_s", "samples_per_s")}
        for side, vals in results.items()
    }
    ours, theirs = med["dist-notebook"], med["torchrun"]

    def spread(side: str, key: str, digits: int) -> str:
        vals = [v[key] for v in results[side]]
        return f"{fmt(min(vals), digits)}-{fmt(max(vals), digits)}"

    rows = [
        [
            what,
            fmt(ours[key], digits),
            spread("dist-notebook", key, digits),
            fmt(theirs[key], digits),
            spread("torchrun", key, digits),
            fmt(ours[key] / theirs[key], 3) + "x",
        ]
        for what, key, digits in (
            ("start to first collective (s)", "first_s", 2),
            ("DDP samples/s (2 hosts x 1 CPU rank)", "samples_per_s", 0),
        )
    ]
    # Each rep ran both sides back to back: the ratio within a rep cancels the drift of
    # the machine's load between reps, which the ratio of medians does not.
    pairs = [
        a["samples_per_s"] / b["samples_per_s"]
        for a, b in zip(results["dist-notebook"], results["torchrun"], strict=False)
    ]
    if pairs:
        rows.append(
            [
                "DDP samples/s, ratio within each rep",
                "",
                "",
                "",
                f"{fmt(min(pairs), 3)}-{fmt(max(pairs), 3)}",
                fmt(statistics.median(pairs), 3) + "x (median)",
            ]
        )
    table = md_table(
        [
            f"{args.reps} reps, interleaved",
            "dist-notebook (ssh), median",
            "min-max",
            "torchrun c10d, median",
            "min-max",
            "ratio of medians",
        ],
        rows,
    )
    print(table)
    common.write_result(
        "multinode",
        {
            "reps": args.reps,
            "steps": args.steps,
            "raw": results,
            "hung": hung,
            "median": med,
            "paired_ratios": pairs,
            "table": table,
        },
    )


if __name__ == "__main__":
    main()
