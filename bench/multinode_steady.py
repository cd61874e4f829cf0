"""Steady DDP throughput on two test hosts: ours, torchrun and a plain script, standing.

    sudo .venv/bin/python -m bench run multinode_steady [--rounds 40] [--steps 500]

``bench/multinode.py`` starts every side afresh for each run, so each sample carries a
new set of processes and whatever this shared machine does at that moment: single runs
differ by 15-25 % and a few runs cannot show a difference of a few percent. Here the
three sides are started once and stay up side by side (one CPU rank per host each):

- **dist-notebook**: an ssh cluster (``DistCluster``), a block is an ``apply`` of the
  training function on both ranks;
- **torchrun**: ``torchrun --nnodes 2 --rdzv-backend c10d``, one agent per host;
- **plain**: the same script started over ssh with our ranks' variables, no launcher.

Each side builds the same DDP model once (``multinode.TRAIN``); the bench then asks the
sides in turn, in rotating order, for a block of ``--steps`` timed steps (between
barriers), ``--rounds`` times. torchrun's and plain's rank 0 take their orders over a TCP
connection to this process on the hosts' bridge (rank 1 follows by a broadcast, outside
the timing). The ratios are taken within each round, whose blocks ran back to back.
Writes ``bench/results/multinode_steady.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import textwrap
from typing import Any

from bench import common, multinode
from bench.common import fmt, md_table

# Rank 0 reads a block size per line from the bench ("0": done), rank 1 gets it by a
# broadcast; rank 0 answers with the block's result.
SERVE = (
    textwrap.dedent(
        """
    import json, socket, sys
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    """
    )
    + multinode.TRAIN
    + textwrap.dedent(
        """
    run = make_trainer()
    run(0, warmup=20)
    orders = None
    if dist.get_rank() == 0:
        orders = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=600)
        orders = orders.makefile("rw")
        orders.write(sys.argv[3] + "\\n")
        orders.flush()
    n = torch.zeros(1, dtype=torch.int64)
    while True:
        if orders is not None:
            n[0] = int(orders.readline() or 0)
        dist.broadcast(n, 0)
        if int(n) == 0:
            break
        result = run(int(n))
        if orders is not None:
            orders.write(json.dumps(result) + "\\n")
            orders.flush()
    dist.destroy_process_group()
    """
    )
)


class Remote:
    """A side whose rank 0 connected back to the bench and takes orders."""

    def __init__(self, listener: socket.socket, name: str, procs: list[Any]) -> None:
        self.procs = procs
        conn, _ = listener.accept()
        conn.settimeout(300)
        self.io = conn.makefile("rw")
        said = self.io.readline().strip()
        if said != name:
            raise RuntimeError(f"expected {name} to connect, got {said!r}")

    def block(self, steps: int) -> dict[str, float]:
        self.io.write(f"{steps}\n")
        self.io.flush()
        return json.loads(self.io.readline())

    def close(self) -> None:
        self.io.write("0\n")
        self.io.flush()
        for p in self.procs:
            try:
                p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()


class Ours:
    def __init__(self, hosts: Any) -> None:
        from dist_notebook import ClusterSpec, DistCluster
        from dist_notebook.cluster.onranks.execute import run_on_ranks

        spec = ClusterSpec(
            n=2, launcher="ssh", hosts=(("h1", 1), ("h2", 1)), ip=hosts.gateway, threads=1
        )
        self.cluster = DistCluster(spec)
        self.cluster.start_sync()
        run_on_ranks(self.cluster, multinode.TRAIN + "\n_run = make_trainer()\n_run(0, 20)\n")

    def block(self, steps: int) -> dict[str, float]:
        from dist_notebook.cluster.onranks.execute import apply_on_ranks

        return dict(apply_on_ranks(self.cluster, _call_block, steps)[0].value)

    def close(self) -> None:
        self.cluster.stop_sync()


def _call_block(steps: int) -> dict[str, float]:
    from IPython import get_ipython

    return dict(get_ipython().user_ns["_run"](steps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4 if common.quick() else 40)
    parser.add_argument("--steps", type=int, default=100 if common.quick() else 500)
    args = parser.parse_args()
    from testbed.sshd import start_sshd

    hosts, script = multinode.hosts_and_script(SERVE)
    sides: dict[str, Any] = {}
    raw: dict[str, list[dict[str, float]]] = {"dist-notebook": [], "torchrun": [], "plain": []}
    try:
        ssh_config = str(start_sshd(hosts))
        os.environ["DIST_NOTEBOOK_SSH_CONFIG"] = ssh_config
        with socket.create_server((hosts.gateway, 0)) as listener:
            listener.settimeout(180)
            port = listener.getsockname()[1]
            h1 = hosts.hosts[0]
            procs = multinode.torchrun_procs(
                hosts, script, [hosts.gateway, str(port), "torchrun"], multinode.free_port_on(h1)
            )
            sides["torchrun"] = Remote(listener, "torchrun", procs)
            procs = multinode.plain_procs(
                hosts,
                script,
                [hosts.gateway, str(port), "plain"],
                multinode.free_port_on(h1),
                ssh_config,
            )
            sides["plain"] = Remote(listener, "plain", procs)
        sides["dist-notebook"] = Ours(hosts)
        for rnd in range(args.rounds):
            order = list(raw)[rnd % 3 :] + list(raw)[: rnd % 3]
            for side in order if rnd % 2 == 0 else order[::-1]:
                raw[side].append(sides[side].block(args.steps))
            print(rnd, {k: round(v[-1]["samples_per_s"]) for k, v in raw.items()}, flush=True)
    finally:
        for side in sides.values():
            side.close()
        hosts.down()
    report(raw, args)


def report(raw: dict[str, list[dict[str, float]]], args: Any) -> None:
    rows = []
    for side, vals in raw.items():
        sps = [v["samples_per_s"] for v in vals]
        step = statistics.median(v["step_ms_p50"] for v in vals)
        spread = f"{fmt(min(sps), 0)}-{fmt(max(sps), 0)}"
        rows.append([side, fmt(statistics.median(sps), 0), spread, fmt(step, 3)])
    ratios: dict[str, list[float]] = {}
    for a, b in (("dist-notebook", "torchrun"), ("plain", "torchrun"), ("dist-notebook", "plain")):
        r = sorted(
            x["samples_per_s"] / y["samples_per_s"] for x, y in zip(raw[a], raw[b], strict=True)
        )
        ratios[f"{a} / {b}"] = r
        # The middle half of the rounds' ratios: where the median sits, for the reader.
        quart = f"{fmt(r[len(r) // 4], 3)}-{fmt(r[(3 * len(r)) // 4], 3)}"
        mid = fmt(statistics.median(r), 3) + "x"
        rows.append([f"{a} / {b}, within each round", mid, quart, ""])
    table = md_table(
        [
            f"{args.rounds} rounds x {args.steps} steps",
            "samples/s, median (ratio: median)",
            "min-max (ratio: middle half)",
            "median step (ms)",
        ],
        rows,
    )
    print(table)
    common.write_result(
        "multinode_steady",
        {"rounds": args.rounds, "steps": args.steps, "raw": raw, "ratios": ratios, "table": table},
    )


if __name__ == "__main__":
    main()
