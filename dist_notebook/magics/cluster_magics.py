"""%dist_cluster start | status | stop | restart | stacks | scale | attach | detach | list."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ..cluster import ClusterConfigError, ClusterError, ClusterSpec, ClusterState, DistCluster, pool
from ..cluster.devices import visible_gpus
from ..cluster.engines import strategy_for
from ..cluster.kind import Cluster
from ..cluster.onranks.transfer import warm_up
from ..detached.attached import AttachedCluster, start_detached
from .args import (
    HELP,
    duration,
    exclusive,
    flags_from,
    help_text,
    int_list,
    parse,
    positive_float,
    positive_int,
    thread_count,
)
from .output import BY_NODE_BEYOND, Progress, Table, nodes_table
from .remote_args import (
    add_remote_flags,
    local_ip,
    refuse_foreign_flags,
    remote_cluster_spec,
    scale_action,
)
from .session import Session

ACTIONS = ("start", "status", "stop", "restart", "stacks", "scale", "attach", "detach", "list")
STOPPING_WAIT_S = 60.0  # a start waits this long for a stop in progress to finish


EXAMPLES = """
  %dist_cluster start                  one rank per visible GPU (NCCL), else 2 CPU ranks
  %dist_cluster start -n 4 --cpu       4 CPU ranks with gloo
  %dist_cluster start --gpus 0,1       ranks on GPUs 0 and 1
  %dist_cluster start --launcher slurm --nodes 2 --gpus-per-node 4
  %dist_cluster start --launcher ray -n 4 --gpus-per-rank 1 --spread
  %dist_cluster status                 the table of ranks (beyond 8: of nodes)
  %dist_cluster status --all           a row per rank, however many
  %dist_cluster restart [--all]        replace dead ranks (or every engine)
  %dist_cluster stacks                 every rank's Python stack now
  %dist_cluster scale 4                add or remove ranks between cells; rebuild DDP models
  %dist_cluster scale --hosts h1:2,h2:1  ssh/mpi: the new ranks per host
  %dist_cluster stop
  %dist_cluster start --detach --idle-timeout 2h   ranks that outlive this kernel
  %dist_cluster attach [ID]            take a detached cluster (default: the newest)
  %dist_cluster detach                 let go of it: it goes on without this kernel
  %dist_cluster list                   this user's detached clusters
"""


def build_spec(args: Any, gpus_here: list[int]) -> ClusterSpec:
    """Turn parsed flags into a ClusterSpec, checking GPUs against what the host has."""
    refuse_foreign_flags(args)
    if not strategy_for(args.launcher).on_this_machine or args.hosts or args.nodes:
        return remote_cluster_spec(args)
    gpus: tuple[int, ...] = ()
    if args.gpus is not None:
        if not gpus_here:
            raise UsageError(
                "--gpus was given but no GPU is visible here: use --cpu (gloo) instead"
            )
        unknown = [g for g in args.gpus if g not in gpus_here]
        if unknown:
            raise UsageError(
                f"unknown GPU id {unknown[0]}: visible GPUs are {','.join(map(str, gpus_here))}"
            )
        gpus = tuple(args.gpus)
    elif not args.cpu and gpus_here and args.backend != "gloo":
        count = args.n or len(gpus_here)
        if count > len(gpus_here):
            raise UsageError(
                f"-n {count} asks for more ranks than the {len(gpus_here)} GPUs here: "
                f"use -n {len(gpus_here)}, or --cpu for CPU ranks"
            )
        gpus = tuple(gpus_here[:count])
    if args.backend == "nccl" and not gpus:
        raise UsageError(
            "--backend nccl needs GPUs: none is in use here; use --backend gloo or --cpu"
        )
    n = args.n or (len(gpus) if gpus else 2)
    try:
        return ClusterSpec(
            n=n,
            gpus=gpus,
            backend=args.backend,
            timeout=args.timeout,
            threads=args.threads,
            ip=local_ip(args),
            launcher=args.launcher,
            auto_restart=args.auto_restart,
            force=args.force,
        )
    except ClusterConfigError as e:
        raise UsageError(str(e)) from None


def ranks_table(cluster: Cluster, every_rank: bool = False, age: bool = False) -> Table:
    """One row per rank; a node column when the ranks span more than one node. Beyond
    BY_NODE_BEYOND ranks one row per node, unless *every_rank* (``status --all``).

    The title says how long the start took (the start's own cell) or, with *age*
    (``status``), how long the cluster has been up; a rank of a run in progress (a
    ``--background`` one) is busy, whatever its engine last reported."""
    run = cluster.owner.active_run()
    busy = set(run.ranks) if run is not None else set()
    ranks = [
        dataclasses.replace(r, state="busy") if r.rank in busy and r.state == "idle" else r
        for r in cluster.ranks
    ]
    title = f"cluster {cluster.id}: {cluster.state.value}"
    if cluster.start_seconds is not None and cluster.state == ClusterState.READY:
        if age and cluster.ready_since is not None:
            up = _duration(time.time() - cluster.ready_since)
            title += f" for {up} (started in {cluster.start_seconds:.1f} s)"
        else:
            title += f" in {cluster.start_seconds:.1f} s"
    if run is not None:
        title += f", run {run.name} in progress"
    if len(ranks) > BY_NODE_BEYOND and not every_rank:
        title += f", {len(ranks)} ranks (status --all: a row per rank)"
        return _by_node(cluster, ranks, title)
    if len({r.node_rank for r in ranks}) > 1:
        nodes = [(r.rank, r.node_rank, r.host, r.pid, r.device, r.backend, r.state) for r in ranks]
        return Table(("rank", "node", "host", "pid", "device", "backend", "state"), nodes, title)
    rows = [(r.rank, r.host, r.pid, r.device, r.backend, r.state) for r in ranks]
    return Table(("rank", "host", "pid", "device", "backend", "state"), rows, title)


def _by_node(cluster: Cluster, ranks: list[Any], title: str) -> Table:
    """The table of nodes; with the slowest rank of each in the run going or, on an idle
    cluster, in its last run (named in the title), from the run's summary."""
    run = getattr(cluster.owner, "run", None)
    if run is None or not run.metrics.ranks:
        return nodes_table(ranks, title)
    summary = run.metrics.run_summary(run.id, run.state.value, None)
    # How long the others wait for a rank each step where the summary has it, else its
    # time outside the all-reduce: one measure for every rank.
    waits = {r.rank: getattr(r, "others_wait", None) for r in summary.ranks}
    use_waits = any(v is not None for v in waits.values())
    times = waits if use_waits else {r.rank: r.compute_time for r in summary.ranks}
    slow = [r.rank for r in summary.ranks if r.straggler]
    if cluster.owner.active_run() is None:
        title += f"; slowest: in last run {run.name}"
    return nodes_table(ranks, title, times, slow)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@magics_class
class ClusterMagics(Magics):
    def __init__(self, shell: Any, session: Session) -> None:
        super().__init__(shell)
        self.session = session

    @magic_arguments("%dist_cluster")
    @HELP
    @argument(
        "action", nargs="?", default="status", choices=ACTIONS, help="what to do (default: status)"
    )
    @argument(
        "count",
        nargs="?",
        metavar="N|ID",
        help="with scale: the new number of ranks (no default); with attach: the cluster's"
        " id (default: the newest detached cluster)",
    )
    @argument("-n", type=positive_int, help="number of ranks (default: GPUs, else 2)")
    @exclusive(
        argument(
            "--gpus",
            type=int_list,
            metavar="IDS",
            help="GPU ids, one per rank, e.g. 0,1 (default: every visible GPU, or -n of them)",
        ),
        argument("--cpu", action="store_true", help="CPU ranks (gloo) even if GPUs exist"),
    )
    @argument(
        "--backend",
        default="auto",
        choices=("auto", "nccl", "gloo"),
        help="process group backend (default: auto, nccl on GPUs and gloo on CPU)",
    )
    @argument(
        "--timeout",
        type=positive_float,
        default=30.0,
        metavar="S",
        help="collective timeout in seconds (default: 30)",
    )
    @argument(
        "--threads",
        type=thread_count,
        metavar="K",
        help="threads per rank (default: cores / ranks)",
    )
    @argument("--ip", metavar="ADDR", help="address to listen on (default: 127.0.0.1, loopback)")
    @flags_from(add_remote_flags)
    @argument(
        "--auto-restart", action="store_true", help="replace a rank's engine by itself when it dies"
    )
    @argument(
        "--force",
        action="store_true",
        help="with start: more ranks than this machine's memory seems to hold; with attach: "
        "take a detached cluster from the kernel attached to it",
    )
    @argument(
        "--all",
        action="store_true",
        help="with restart: replace every engine, not only dead ones; with status: a row per "
        "rank (beyond 8 ranks status has a row per node)",
    )
    @argument(
        "--launcher",
        default="local",
        choices=("local", "mpi", "ssh", "slurm", "ray"),
        help="ipyparallel launcher (default: local, this machine)",
    )
    @argument(
        "--detach",
        action="store_true",
        help="with start: the cluster outlives this kernel (attach to it from any kernel)",
    )
    @argument(
        "--idle-timeout",
        type=duration,
        metavar="T",
        help="with start --detach: stop it after T unused, e.g. 30m, 2h, 90s (default: never)",
    )
    @help_text(EXAMPLES)
    @line_magic
    def dist_cluster(self, line: str) -> None:
        """Start, inspect, stop or restart the ranks (with no action: status)."""
        args = parse(self.dist_cluster, line)
        if args is None:
            return
        try:
            getattr(self, f"_{args.action}")(args)
        except (ClusterError, ClusterConfigError) as e:
            raise UsageError(str(e)) from None

    def _start(self, args: Any) -> None:
        if args.idle_timeout is not None and not args.detach:
            raise UsageError(
                "%dist_cluster: --idle-timeout is for a detached cluster: add --detach"
            )
        current = self.session.cluster
        if current is not None:
            # A stop from the panel is finishing: the new cluster starts once it has.
            self.session.wait_for_stop(current, STOPPING_WAIT_S)
        spec = build_spec(args, visible_gpus() if not args.cpu else [])
        if current is not None and current.state == ClusterState.READY and current.spec == spec:
            # A second "Run All": the same start again reuses the ready cluster.
            print(
                f"cluster {current.id} is already ready with this spec: reusing it "
                "(%dist_cluster restart --all for fresh engines)"
            )
            display(ranks_table(current))
            return
        if current is not None and current.state not in (ClusterState.STOPPED, ClusterState.FAILED):
            raise UsageError(
                f"a cluster is already {current.state.value}: use %dist_cluster restart, "
                "or %dist_cluster stop first"
            )
        # torch into the kernel in the background (the first %dist_pull of tensors needs
        # it), overlapping the engines' start rather than the first cell after it
        warm_up()
        if args.detach:
            progress = Progress()  # its line ends as the table (saved: only the table)
            detached = start_detached(spec, args.idle_timeout, progress=progress)
            self.session.cluster = detached
            progress.finish(ranks_table(detached))
            print(
                f"cluster {detached.id} is detached (keeper pid {detached.keeper_pid}"
                f"{_idle_note(args.idle_timeout)}): it outlives this kernel; "
                f"%dist_cluster attach {detached.id} from any kernel takes it back"
            )
            return
        # A spare of the same spec (cluster/pool.py) when one was kept warm, else cold.
        progress = Progress()  # its line ends as the table (saved: only the table)
        cluster = pool.take(spec, progress) or DistCluster(spec, progress=progress)
        self.session.cluster = cluster
        if cluster.state != ClusterState.READY:
            cluster.start_sync()
        progress.finish(ranks_table(cluster))

    def _status(self, args: Any) -> None:
        cluster = self.session.cluster
        if cluster is None:
            print("no cluster: start one with %dist_cluster start")
            return
        if cluster.state in (ClusterState.STOPPED, ClusterState.NEW):
            # No table of pids that are gone: the ranks ended with the cluster.
            print(
                f"cluster {cluster.id}: {cluster.state.value}; start one with %dist_cluster start"
            )
            return
        cluster.refresh()  # a keeper's state; a gone keeper is said in one line
        display(ranks_table(cluster, every_rank=args.all, age=True))
        if cluster.detached:
            print(
                f"detached: keeper pid {cluster.keeper_pid}{_idle_note(cluster.idle_timeout)};"
                " %dist_cluster detach lets go of it"
            )

    def _stop(self, args: Any) -> None:
        cluster = self.session.cluster
        if cluster is None or cluster.state == ClusterState.STOPPED:
            print("no cluster is running")
            return
        # The owner cancels a run first, and starts a spare if this spec is kept warm.
        cluster.owner.stop()
        print(f"cluster {cluster.id} stopped")

    def _stacks(self, args: Any) -> None:
        """The hang report: every rank's Python stack now (nothing is interrupted)."""
        from ..cluster.onranks.stacks import collect_stacks
        from . import stacks_report

        cluster = self.session.cluster
        if cluster is None or not cluster.ranks:
            raise UsageError("no cluster is running: start one with %dist_cluster start")
        if not cluster.spec.engines.on_this_machine:
            raise UsageError("stacks needs local engines: their stack files are on other hosts")
        print(stacks_report.report(collect_stacks(cluster)))

    def _scale(self, args: Any) -> None:
        try:
            count = None if args.count is None else positive_int(args.count)
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"%dist_cluster: argument count: {e}") from None
        if self.session.cluster is not None and self.session.cluster.detached:
            raise UsageError(
                "%dist_cluster: a detached cluster keeps its size: stop it and start one "
                f"with -n {count or 'N'} --detach"
            )
        progress = Progress()
        cluster = scale_action(self.session.cluster, count, progress, args.hosts)
        progress.finish(ranks_table(cluster))

    def _restart(self, args: Any) -> None:
        cluster = self.session.cluster
        if cluster is None or cluster.state in (ClusterState.STOPPED, ClusterState.NEW):
            raise UsageError("no cluster to restart: start one with %dist_cluster start")
        cluster.progress = progress = Progress()
        cluster.restart_sync(everything=args.all)
        progress.finish(ranks_table(cluster))

    # --- detached clusters ---------------------------------------------------------
    def _attach(self, args: Any) -> None:
        from ..detached.attached import find_keeper

        current = self.session.cluster
        if current is not None and current.state not in (ClusterState.STOPPED, ClusterState.FAILED):
            if current.detached and (args.count is None or current.id.startswith(args.count)):
                current.refresh()
                print(f"cluster {current.id} is attached to this kernel already")
                display(ranks_table(current))
                return
            raise UsageError(
                f"this kernel holds cluster {current.id} ({current.state.value}): "
                "%dist_cluster stop (or detach) it first"
            )
        t0 = time.perf_counter()
        cluster = AttachedCluster.attach_file(find_keeper(args.count), force=args.force)
        self.session.cluster = cluster
        took = time.perf_counter() - t0
        display(ranks_table(cluster, age=True))
        print(f"attached to cluster {cluster.id} in {took:.2f} s (keeper pid {cluster.keeper_pid})")
        run = cluster.owner.active_run()
        if run is not None:
            self._follow(run)

    def _follow(self, run: Any) -> None:
        """A run in progress at attach: its live view back, from its records, then live."""
        from .attach_view import follow_attached

        follow_attached(run)

    def _detach(self, args: Any) -> None:
        cluster = self.session.cluster
        if cluster is None or not cluster.detached:
            raise UsageError(
                "%dist_cluster: this kernel holds no detached cluster (start one with "
                "%dist_cluster start --detach)"
            )
        cluster.detach()
        self.session.cluster = None
        print(
            f"cluster {cluster.id} goes on without this kernel: %dist_cluster attach {cluster.id}"
        )

    def _list(self, args: Any) -> None:
        from ..detached.attached import list_detached

        rows: list[tuple[Any, ...]] = []
        for info in list_detached():
            if "error" in info:
                rows.append((info["id"], "-", "-", "-", "-", "-", info["error"]))
                continue
            hosts = sorted({r["host"] for r in info["ranks"]})
            holder = info["holder"]
            rows.append(
                (
                    info["id"],
                    len(info["ranks"]),
                    ",".join(hosts),
                    _duration(time.time() - info["started"]),
                    "-" if holder else _duration(info["idle_s"]),
                    "never" if info["idle_timeout"] is None else _duration(info["idle_timeout"]),
                    f"kernel {holder}" + (" (this one)" if holder == os.getpid() else "")
                    if holder
                    else "none",
                )
            )
        if not rows:
            print("no detached cluster: start one with %dist_cluster start --detach")
            return
        columns = ("cluster", "ranks", "hosts", "age", "idle", "idle timeout", "attached")
        display(Table(columns, rows, "detached clusters"))


def _idle_note(timeout: float | None) -> str:
    return "" if timeout is None else f", stops after {_duration(timeout)} unused"
