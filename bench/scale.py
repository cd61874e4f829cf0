"""At scale: the control plane from 2 to 64 local CPU ranks, side by side with the peers.

    python -m bench run scale                                   # every part, 2..64 ranks
    python -m bench run scale --parts ingest,summary,live --reps 3
    python -m bench run scale --parts dispatch,start --ranks 2,8 --reps 1

Parts (each repeated ``--reps`` times; the tables give the median and the spread, min-max):

  start     from nothing to one all_reduce over every rank, a fresh child process each
            time (``bench/cold_start.py``'s children): ``%dist_cluster start -n N --cpu``
            (fork server) vs ``torchrun --standalone --nproc-per-node N``, interleaved
  dispatch  in one IPython shell (the kernel), one cluster per size: an empty ``%%dist``
            (the magic's function, as IPython calls it) vs raw ipyparallel on the same
            engines: ``DirectView.execute("", silent=False, block=True)`` (what ``%%dist``
            sends) and ``BroadcastView.execute`` (one request, the broadcast scheduler fans
            it out), interleaved A B C, C B A. Wall time, and the kernel process's CPU per
            dispatch (every thread of it: ipyparallel's IO threads count), per rank too.
            Also: the lines one ``print`` shows from every rank, the start to ready in
            the warm kernel, the memory each forked rank adds (USS: pages of its own, from
            the pids the cluster recorded; and the machine's available memory before/after)
  ingest    the kernel's collector and run-store writer (dist_notebook/training/
            collector.py, store/writer.py) fed by synthetic senders in other processes,
            signed messages in the real wire format (protocol.wire_message, JSON, HMAC as
            engine/reporter.py sends them): a flood (records per CPU second of the kernel
            process, and per wall second) and a steady 64 ranks x 200 records/s (the
            kernel's share of a core). Every record is counted in the store afterwards.
  summary   ``StoreReader.summary`` (what ``GET runs/<id>/summary`` answers) on a 64-rank
            run of 10^6 records: p50 and p95 of 30 calls
  live      the live view's feed (display/live.py) at N ranks x 200 records/s: bytes per
            second it sends to the browser, over 5 s

Writes ``bench/results/scale.json``, ``bench/results/scale.md`` (the tables) and
``bench/results/scale.png`` (the curves). The machine's load average is in every table:
this 2-core machine is shared, and every figure depends on it.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common

PARTS = ("start", "dispatch", "ingest", "summary", "live")
SIZES = "2,8,16,32,64"
RUN = "scale-run"


def spread(values: list[float]) -> dict[str, Any]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0}
    return {
        "n": len(vals),
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "values": [round(v, 6) for v in vals],
    }


def med(s: dict[str, Any], scale: float = 1.0, digits: int = 1) -> str:
    """'median (min-max)' of a spread."""
    if not s.get("n"):
        return "-"
    m, lo, hi = (s[k] * scale for k in ("median", "min", "max"))
    if s["n"] == 1:
        return f"{m:,.{digits}f}"
    return f"{m:,.{digits}f} ({lo:,.{digits}f}-{hi:,.{digits}f})"


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


# ---- synthetic senders (children) ---------------------------------------------------------


def signed(
    key: bytes, run_id: str, rank: int, rows: list[list[Any]], end: bool, wire: str = "columns"
) -> list[bytes]:
    """One message exactly as engine/reporter.py's sender makes it (``wire="columns"``),
    or as a rank of an older install does (``"rows"``: protocol.wire_message's JSON)."""
    from dist_notebook import protocol
    from dist_notebook.engine import reporter

    if wire == "columns":
        payload = reporter._payload(run_id, rank, rows, end)
    else:
        message = protocol.wire_message(run_id, rank, rows, end=end)
        payload = json.dumps(message, separators=(",", ":")).encode()
    return [hmac.new(key, payload, hashlib.sha256).digest(), payload]


def row(step: int, now: float) -> list[Any]:
    """A record as report(step=..., loss=..., samples=...) makes it, with a step hook."""
    return [step, now, 0.01, 0.002, 32.0, {"loss": 1.0 / (step + 1), "lr": 3e-4}, None]


def child_sender(args: argparse.Namespace) -> None:
    """Ranks args.first .. args.first+args.count-1, one PUSH socket each (as each rank has).

    flood: every message made first (so the kernel, not this process, is the limit),
    "ready" on stdout, then all sent at once on "go". steady: args.rate records a second
    per rank, shipped every 0.05 s (reporter.BATCH_SECONDS), for args.seconds."""
    import zmq

    key = bytes.fromhex(args.key)
    ranks = range(args.first, args.first + args.count)
    ctx = zmq.Context.instance()
    socks = {}
    for rank in ranks:
        s = ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.LINGER, 30_000)
        s.connect(args.endpoint)
        socks[rank] = s
    now = time.time()
    if args.mode == "flood":
        msgs = {}
        for rank in ranks:
            out, n, b = [], args.records, args.batch
            for start in range(0, n, b):
                rows = [row(s, now) for s in range(start, min(n, start + b))]
                out.append(signed(key, RUN, rank, rows, start + b >= n, args.wire))
            msgs[rank] = out
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(max(len(m) for m in msgs.values())):
            for rank in ranks:
                if i < len(msgs[rank]):
                    socks[rank].send_multipart(msgs[rank][i])
    else:
        print("ready", flush=True)
        sys.stdin.readline()
        period, per = 0.05, args.rate * 0.05
        steps = dict.fromkeys(ranks, 0)
        t0 = time.monotonic()
        tick = 0
        while True:
            tick += 1
            due = t0 + tick * period
            time.sleep(max(0.0, due - time.monotonic()))
            elapsed = time.monotonic() - t0
            last = elapsed >= args.seconds
            # Records due by now (so a late wake-up does not lower the rate), all of them
            # by the end (a sender that fell behind on a loaded machine sent fewer before).
            want = int(round(min(elapsed, args.seconds) * args.rate))
            for rank in ranks:
                k = want - steps[rank]
                rows = [row(steps[rank] + j, time.time()) for j in range(max(0, k))]
                steps[rank] += len(rows)
                socks[rank].send_multipart(signed(key, RUN, rank, rows, last, args.wire))
            if last:
                break
        del per
    for s in socks.values():
        s.close()
    ctx.term()


# ---- ingest ---------------------------------------------------------------------------------


def _kernel_side(ranks: int, store: Path) -> tuple[Any, Any, bytes]:
    from dist_notebook.metrics import RunMetrics
    from dist_notebook.store import StoreWriter
    from dist_notebook.training.collector import Collector

    writer = StoreWriter(store)
    writer.add_cluster(
        "scale", n=ranks, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    writer.add_run(RUN, name="scale", cluster_id="scale", ranks=range(ranks), steps=None, code="")
    key = os.urandom(32)
    collector = Collector(RUN, key, RunMetrics(list(range(ranks))), writer)
    return collector, writer, key


def _senders(endpoint: str, key: bytes, ranks: int, procs: int, extra: list[str]) -> list[Any]:
    per = -(-ranks // procs)
    children = []
    for first in range(0, ranks, per):
        cmd = common.module_cmd(
            "scale", "--child", "sender", "--endpoint", endpoint, "--key", key.hex()
        )
        cmd += ["--first", str(first), "--count", str(min(per, ranks - first)), *extra]
        children.append(
            subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=common.child_env(),
                cwd=common.ROOT,
            )
        )
    for c in children:
        if c.stdout.readline().strip() != "ready":
            raise RuntimeError("a sender did not start")
    return children


def ingest_once(
    mode: str, ranks: int, records: int, batch: int, rate: int, seconds: float, wire: str
) -> dict[str, Any]:
    store = Path(tempfile.mkdtemp(prefix="dist-scale-")) / "runs.sqlite"
    collector, writer, key = _kernel_side(ranks, store)
    extra = ["--mode", mode, "--records", str(records), "--batch", str(batch)]
    extra += ["--rate", str(rate), "--seconds", str(seconds), "--wire", wire]
    children = _senders(collector.endpoint, key, ranks, 4, extra)
    try:
        cpu0, t0 = time.process_time(), time.perf_counter()
        for c in children:
            c.stdin.write("go\n")
            c.stdin.flush()
        missing = collector.wait_for_ends(set(range(ranks)), 300)
        t_in = time.perf_counter()
        collector.close()  # the last flush to the store
        writer.flush(30)
        cpu1, t1 = time.process_time(), time.perf_counter()
        for c in children:
            c.wait(timeout=60)
        stored = writer._conn.execute(
            "SELECT COUNT(*) FROM metrics WHERE run_id = ?", (RUN,)
        ).fetchone()[0]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait(10)
    expected = ranks * (records if mode == "flood" else int(round(rate * seconds)))
    writer.close()
    cpu = cpu1 - cpu0
    out = {
        "records": expected,
        "received": collector.received,
        "stored": stored,
        "rejected": collector.rejected,
        "missing_ends": sorted(missing),
        "cpu_s": cpu,
        "collector_cpu_s": collector.cpu,
        "wall_s": t1 - t0,
        "load": load(),
    }
    if mode == "flood":
        out["per_cpu_s"] = stored / cpu
        out["per_collector_cpu_s"] = stored / collector.cpu
        out["per_wall_s"] = stored / (t1 - t0)
    else:
        # Over the run's wall time, and at exactly ranks x rate (the CPU per record times
        # the rate asked for): on a loaded machine the senders fall behind, the run takes
        # longer and the first share is the lower; the second is the figure to read.
        out["core_share_wall"] = cpu / (t_in - t0)
        out["rate"] = stored / (t_in - t0)
        out["core_share"] = cpu / stored * ranks * rate if stored else None
    return out


def part_ingest(args: argparse.Namespace) -> dict[str, Any]:
    """Flood and steady, with report()'s wire ("columns") and, beside it, the JSON rows
    of a rank of an older install ("rows": the kernel still takes them)."""
    res: dict[str, Any] = {"flood": {}, "steady": None, "flood_rows": {}, "steady_rows": None}
    records = 500 if args.quick else 5000
    seconds = 3.0 if args.quick else 10.0
    for wire, batches in (("columns", (100, 10)), ("rows", (100,))):
        key = "" if wire == "columns" else "_rows"
        for batch in batches:
            runs = [ingest_once("flood", 64, records, batch, 0, 0, wire) for _ in range(args.reps)]
            res["flood" + key][batch] = runs
            print(f"ingest flood ({wire}) 64 ranks x {records}, {batch}/message:", flush=True)
            print(f"  {med(spread([r['per_cpu_s'] for r in runs]), digits=0)} records/CPU-s")
        runs = [ingest_once("steady", 64, 0, 0, 200, seconds, wire) for _ in range(args.reps)]
        res["steady" + key] = runs
        share = med(spread([r["core_share"] for r in runs]), 100)
        print(f"ingest steady ({wire}) 64 x 200/s: {share} % core", flush=True)
    return res


# ---- summary --------------------------------------------------------------------------------


def part_summary(args: argparse.Namespace) -> dict[str, Any]:
    from dist_notebook import protocol
    from dist_notebook.store import StoreReader, StoreWriter

    ranks, total = 64, 100_000 if args.quick else 1_000_000
    store = Path(tempfile.mkdtemp(prefix="dist-scale-")) / "runs.sqlite"
    writer = StoreWriter(store)
    writer.add_cluster(
        "scale", n=ranks, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    writer.add_run(RUN, name="scale", cluster_id="scale", ranks=range(ranks), steps=None, code="")
    per = total // ranks
    now = time.time()
    cpu0 = time.process_time()
    for start in range(0, per, 200):  # as the collector writes: a flush holds every rank
        recs = [
            protocol.Record(r, s, now + s, 0.01, 0.002, 32.0, {"loss": 1.0 / (s + 1)})
            for s in range(start, min(per, start + 200))
            for r in range(ranks)
        ]
        writer.append_metrics(RUN, recs)
    write_cpu = time.process_time() - cpu0
    writer.set_run_state(RUN, "running")
    writer.close()
    reader = StoreReader(store)
    times = []
    for _ in range(30):
        t0 = time.perf_counter()
        summary = reader.summary(RUN)
        times.append(time.perf_counter() - t0)
    assert summary is not None and sum(r.records for r in summary.ranks) == per * ranks
    reader.close()
    out = {
        "ranks": ranks,
        "records": per * ranks,
        "write_per_cpu_s": per * ranks / write_cpu,
        "p50_ms": common.percentile(times, 50) * 1e3,
        "p95_ms": common.percentile(times, 95) * 1e3,
        "load": load(),
    }
    print(
        f"summary {ranks} ranks, {per * ranks:,} records: p50 {out['p50_ms']:.1f} ms,"
        f" p95 {out['p95_ms']:.1f} ms; writer alone {out['write_per_cpu_s']:,.0f} rec/CPU-s",
        flush=True,
    )
    return out


# ---- live view ------------------------------------------------------------------------------


class _Counter:
    """Stands in for the widget's comm: counts what the feed would send (JSON bytes)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.messages = 0

    def send(self, message: dict[str, Any]) -> None:
        self.bytes += len(json.dumps(message))
        self.messages += 1


def live_once(ranks: int, seconds: float) -> dict[str, Any]:
    from dist_notebook import protocol
    from dist_notebook.display.live import LiveFeed
    from dist_notebook.metrics import RunMetrics

    metrics = RunMetrics(list(range(ranks)))
    counter = _Counter()
    feed = LiveFeed(counter, metrics, lambda: metrics.run_summary(RUN, "running", None))  # type: ignore[arg-type]
    feed.start()
    t0 = time.monotonic()
    tick, step = 0, 0
    while time.monotonic() - t0 < seconds:  # 200 records/s per rank, every 0.05 s
        tick += 1
        time.sleep(max(0.0, t0 + tick * 0.05 - time.monotonic()))
        now = time.time()
        batch = [
            protocol.Record(r, step + j, now, 0.01, 0.002, 32.0, {"loss": 1.0 / (step + j + 1)})
            for r in range(ranks)
            for j in range(10)
        ]
        step += 10
        metrics.add(batch)
    feed.stop()
    wall = time.monotonic() - t0
    return {
        "ranks": ranks,
        "bytes_per_s": counter.bytes / wall,
        "messages_per_s": counter.messages / wall,
        "points_per_s": feed.points / wall,
        "feed_cpu_share": feed.cpu / wall,
        "load": load(),
    }


def part_live(args: argparse.Namespace) -> dict[str, Any]:
    res = {}
    for n in args.sizes:
        runs = [live_once(n, 2.0 if args.quick else 5.0) for _ in range(args.reps)]
        res[n] = runs
        print(
            f"live {n} ranks: {med(spread([r['bytes_per_s'] for r in runs]), 1e-3)} kB/s",
            flush=True,
        )
    return res


# ---- start (fresh children, vs torchrun) ----------------------------------------------------


def part_start(args: argparse.Namespace) -> dict[str, Any]:
    from bench import cold_start

    res: dict[int, dict[str, list[Any]]] = {}
    for n in args.sizes:
        res[n] = {"dist_notebook": [], "torchrun": []}
        for rep in range(args.reps):
            for method in common.interleave(["dist_notebook", "torchrun"], rep):
                r = cold_start.one(method, n, timeout=120 + 6 * n)
                r["load"] = load()
                res[n][method].append(r)
        print(
            f"start {n}: "
            + ", ".join(
                f"{m} {med(spread([r.get('seconds') for r in v]))} s" for m, v in res[n].items()
            ),
            flush=True,
        )
    return res


# ---- dispatch (one warm kernel) -------------------------------------------------------------


def _uss(pids: list[int]) -> list[float]:
    import psutil

    out = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid).memory_full_info().uss)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def _timed(fn: Any) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def dispatch_one(ip: Any, n: int, iterations: int) -> dict[str, Any]:
    import psutil
    from IPython.utils.capture import capture_output

    from dist_notebook.magics.session import Session

    avail0 = psutil.virtual_memory().available
    t0 = time.perf_counter()
    common.quietly(ip.run_line_magic, "dist_cluster", f"start -n {n} --cpu")
    start_s = time.perf_counter() - t0
    cluster = Session.for_shell(ip).cluster
    try:
        time.sleep(1.0)
        avail1 = psutil.virtual_memory().available
        uss = _uss([r.pid for r in cluster.ranks if r.pid])
        magic = ip.find_cell_magic("dist")
        client = cluster.client
        ids = cluster.engine_ids()
        direct = client[ids]
        bcast = client.broadcast_view(ids)
        sides = {
            "dist": lambda: magic("", ""),
            "direct": lambda: direct.execute("", silent=False, block=True),
            "broadcast": lambda: bcast.execute("", silent=False, block=True),
        }
        for _ in range(3):
            for fn in sides.values():
                fn()
        # What the kernel burns with the cluster up and no cell (its watch threads,
        # ipyparallel's heartbeats): taken off each dispatch's CPU below.
        c0, t0 = time.process_time(), time.perf_counter()
        time.sleep(2.0)
        idle = (time.process_time() - c0) / (time.perf_counter() - t0)
        wall: dict[str, list[float]] = {k: [] for k in sides}
        cpu: dict[str, list[float]] = {k: [] for k in sides}
        for i in range(iterations):
            for name in common.interleave(list(sides), i):
                w, c = _timed(sides[name])
                wall[name].append(w)
                cpu[name].append(max(0.0, c - idle * w))
        with capture_output() as cap:
            ip.run_cell_magic("dist", "", 'print("SUM", 64)')
        lines = len([x for x in cap.stdout.splitlines() if "SUM" in x])
    finally:
        common.quietly(ip.run_line_magic, "dist_cluster", "stop")
    return {
        "ranks": n,
        "start_s": start_s,
        "wall_ms": {k: spread([x * 1e3 for x in v]) for k, v in wall.items()},
        "cpu_ms": {k: spread([x * 1e3 for x in v]) for k, v in cpu.items()},
        "print_lines": lines,
        "idle_cpu_share": idle,
        "uss_mib_per_rank": statistics.median(uss) / 2**20 if uss else None,
        "avail_drop_mib_per_rank": (avail0 - avail1) / 2**20 / n,
        "load": load(),
    }


def part_dispatch(args: argparse.Namespace) -> dict[str, Any]:
    common.use_scratch_store()
    ip = common.shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    res: dict[int, list[Any]] = {}
    iterations = 5 if args.quick else 15
    for n in args.sizes:
        res[n] = []
        for _ in range(args.reps):
            r = dispatch_one(ip, n, iterations)
            res[n].append(r)
        r = res[n][-1]
        print(
            f"dispatch {n}: start {r['start_s']:.1f} s; "
            + ", ".join(
                f"{k} {v['median']:.1f} ms (cpu {r['cpu_ms'][k]['median']:.1f})"
                for k, v in r["wall_ms"].items()
            )
            + f"; print lines {r['print_lines']}; USS {r['uss_mib_per_rank']} MiB",
            flush=True,
        )
    return res


# ---- tables, picture, main ------------------------------------------------------------------


def pooled(runs: list[dict[str, Any]], *path: str) -> dict[str, Any]:
    """The spread of every iteration of every repetition (median, min-max)."""
    vals: list[float] = []
    for r in runs:
        x: Any = r
        for p in path:
            x = x[p]
        vals += x["values"]
    return spread(vals)


def dispatch_rows(res: dict[str, Any]) -> list[list[Any]]:
    rows = []
    start = res.get("start", {})
    disp = res.get("dispatch", {})
    live = res.get("live", {})
    per_rank = _per_rank(disp)
    for n in sorted({int(k) for k in (*start, *disp, *live)}):
        s, d, lv = start.get(n) or start.get(str(n)), disp.get(n) or disp.get(str(n)), None
        lv = live.get(n) or live.get(str(n))
        row = [n]
        if s:
            row += [
                med(spread([r.get("seconds") for r in s["dist_notebook"]])),
                med(spread([r.get("seconds") for r in s["torchrun"]])),
            ]
        else:
            row += ["-", "-"]
        if d:
            cpu = pooled(d, "cpu_ms", "dist")
            row += [
                med(spread([r["start_s"] for r in d])),
                med(pooled(d, "wall_ms", "dist")),
                med(pooled(d, "wall_ms", "direct")),
                med(pooled(d, "wall_ms", "broadcast")),
                med(cpu, digits=2),
                med(pooled(d, "cpu_ms", "direct"), digits=2),
                per_rank.get(n, "-"),
                d[-1]["print_lines"],
                med(spread([r["uss_mib_per_rank"] for r in d])),
            ]
        else:
            row += ["-"] * 9
        row.append(med(spread([r["bytes_per_s"] for r in lv]), 1e-3) if lv else "-")
        rows.append(row)
    return rows


def _per_rank(disp: dict[Any, Any]) -> dict[int, str]:
    """The kernel's CPU per rank per %%dist (us): the growth over the smallest size."""
    sizes = sorted(int(k) for k in disp)
    if len(sizes) < 2:
        return {}
    cpu = {n: pooled(disp.get(n) or disp[str(n)], "cpu_ms", "dist")["median"] for n in sizes}
    base = sizes[0]
    return {n: f"{(cpu[n] - cpu[base]) * 1e3 / (n - base):,.0f}" for n in sizes[1:]}


HEAD = [
    "ranks",
    "start, `%dist_cluster start` to 1st all_reduce (s)",
    "start, torchrun --standalone (s)",
    "start in a warm kernel (s)",
    "empty `%%dist` (ms)",
    "raw ipyparallel DirectView (ms)",
    "raw BroadcastView (ms)",
    "kernel CPU per `%%dist` (ms)",
    "kernel CPU per raw DirectView (ms)",
    "kernel CPU per rank, over the 2-rank cost (us)",
    "lines one `print` shows",
    "memory a forked rank adds, USS (MiB)",
    "live view (kB/s)",
]


def ingest_lines(res: dict[str, Any]) -> list[str]:
    out = []
    ing = res.get("ingest")
    for key, wire in (("", "report()'s binary columns"), ("_rows", "older ranks' JSON rows")):
        if not ing or not ing.get("steady" + key):
            continue
        for batch, runs in ing["flood" + key].items():
            ok = all(r["stored"] == r["records"] for r in runs)
            out.append(
                f"- ingest flood ({wire}), 64 senders (4 processes), {batch} records a message:"
                f" {med(spread([r['per_cpu_s'] for r in runs]), digits=0)} records per CPU second"
                f" of the kernel process"
                f" ({med(spread([r['per_collector_cpu_s'] for r in runs]), digits=0)} per CPU"
                f" second of the collector's thread,"
                f" {med(spread([r['per_wall_s'] for r in runs]), digits=0)} per"
                f" wall second); stored {'all' if ok else 'NOT all'} of"
                f" {runs[0]['records']:,}; load {', '.join(r['load'] for r in runs)}"
            )
        runs = ing["steady" + key]
        ok = all(r["stored"] == r["records"] for r in runs)
        out.append(
            f"- ingest steady ({wire}), 64 ranks x 200 records/s: the kernel used"
            f" {med(spread([r['core_share'] for r in runs]), 100)} % of a core (its CPU"
            f" per record x 12,800 records/s; over the wall time"
            f" {med(spread([r.get('core_share_wall') for r in runs]), 100)} % at"
            f" {med(spread([r.get('rate') for r in runs]), digits=0)} records/s); stored"
            f" {'all' if ok else 'NOT all'} of {runs[0]['records']:,};"
            f" load {', '.join(r['load'] for r in runs)}"
        )
    summ = res.get("summary")
    if summ:
        out.append(
            f"- summary of a {summ['ranks']}-rank run of {summ['records']:,} records:"
            f" p50 {summ['p50_ms']:.1f} ms, p95 {summ['p95_ms']:.1f} ms (30 calls); the writer"
            f" alone {summ['write_per_cpu_s']:,.0f} records per CPU second; load {summ['load']}"
        )
    return out


def picture(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    start, disp = res.get("start", {}), res.get("dispatch", {})

    def curve(ax: Any, data: dict[Any, Any], get: Any, label: str) -> None:
        xs = sorted(int(k) for k in data)
        if not xs:
            return
        ss = [get(data.get(x) or data.get(str(x))) for x in xs]
        ys = [s["median"] for s in ss]
        lo = [s["median"] - s["min"] for s in ss]
        hi = [s["max"] - s["median"] for s in ss]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)

    for method, label in (("dist_notebook", "%dist_cluster start"), ("torchrun", "torchrun")):
        curve(a, start, lambda v, m=method: spread([r.get("seconds") for r in v[m]]), label)
    curve(a, disp, lambda v: spread([r["start_s"] for r in v]), "start, warm kernel")
    a.set(xlabel="ranks", ylabel="seconds to the first all_reduce", title="Start")
    for side, label in (
        ("dist", "empty %%dist"),
        ("direct", "raw DirectView"),
        ("broadcast", "raw BroadcastView"),
    ):
        curve(b, disp, lambda v, s=side: pooled(v, "wall_ms", s), label)
    curve(b, disp, lambda v: pooled(v, "cpu_ms", "dist"), "kernel CPU per %%dist")
    b.set(xlabel="ranks", ylabel="ms (median, bars min-max)", title="Dispatch of an empty cell")
    b.set_yscale("log")
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    m = res["machine"]
    fig.suptitle(f"{m['cpus']} cores, load {m['load_average']}, {m['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(res: dict[str, Any], command: str) -> None:
    res["machine"] = common.machine()
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    common.write_result("scale", res)
    text = [f"`{command}` ({res['machine']['date']}, load at the end {load()})", ""]
    text += [f"- {part}: `{how}`" for part, how in res.get("commands", {}).items()] + [""]
    if any(k in res for k in ("start", "dispatch", "live")):
        text += [common.md_table(HEAD, dispatch_rows(res)), ""]
    text += ingest_lines(res)
    (common.RESULTS / "scale.md").write_text("\n".join(text) + "\n")
    if "start" in res or "dispatch" in res:
        picture(res, common.RESULTS / "scale.png")
    print("\n".join(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"of {','.join(PARTS)}")
    parser.add_argument("--ranks", default=SIZES, help="cluster sizes, e.g. 2,8,16")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each measurement")
    parser.add_argument("--quick", action="store_true", help="a smoke run (also BENCH_QUICK=1)")
    parser.add_argument(
        "--merge", action="store_true", help="update these parts in scale.json, keep the others"
    )
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from scale.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    for flag in ("--endpoint", "--key", "--mode", "--wire"):
        parser.add_argument(flag, help=argparse.SUPPRESS)
    for flag in ("--first", "--count", "--records", "--batch", "--rate"):
        parser.add_argument(flag, type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "sender":
        child_sender(args)
        return 0
    if args.replot:
        picture(
            json.loads((common.RESULTS / "scale.json").read_text()), common.RESULTS / "scale.png"
        )
        return 0
    args.quick = args.quick or common.quick()
    if args.quick:
        args.reps = 1
    args.sizes = [int(n) for n in args.ranks.split(",")]
    res: dict[str, Any] = {"ranks": args.sizes, "reps": args.reps}
    done = common.RESULTS / "scale.json"
    if args.merge and done.exists():  # keep the other parts of the last run
        res = {k: v for k, v in json.loads(done.read_text()).items() if k != "machine"}
    parts = {"start": part_start, "dispatch": part_dispatch, "ingest": part_ingest}
    parts.update(summary=part_summary, live=part_live)
    command = "python -m bench run scale " + " ".join(argv if argv is not None else sys.argv[1:])
    for name in args.parts.split(","):
        res[name] = parts[name](args)
        res.setdefault("commands", {})[name] = f"{command} ({common.machine()['date']})"
    write(res, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
