"""Metrics path: report() over ZMQ vs ipyparallel's publish_data, on the same 2 ranks.

    python -m bench run metrics_overhead                # 3 repetitions
    python -m bench run metrics_overhead --reps 1

1. Cost per call on the engine: 2000 calls timed on each rank (report() inside a
   ``%%dist_train`` run; ``publish_data`` inside ``%%dist``, as ipyparallel requires).
2. Throughput of the MLP loop of ``throughput.py`` (2 ranks, 1 thread each) with one
   record per step, interleaved: ``%%dist`` with no reporting, ``%%dist_train`` with
   report() (dashboard drawing; and again with ``--no-dashboard``, which separates the
   cost of sending from the cost of drawing in the kernel on the same cores), ``%%dist``
   with publish_data. Ratios to no reporting.
3. Latency, send to arrival in the kernel: report() to the collector (receive time in
   RunMetrics.add minus the record's own time), and publish_data to ``AsyncResult.data``
   (a kernel thread polls it every millisecond; it keeps only the latest value, so the
   share of records ever seen is given too).

``bench/train_overhead.py`` measures %%dist_train against torchrun with the widget
latency; its numbers are shown next to these in the table. Writes
``bench/results/metrics_overhead.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench import common
from bench.throughput import loop_code, samples_per_s

PER_CALL = """
import time
{setup}
_n = 2000
_t0 = time.perf_counter()
for _i in range(_n):
    {call}
per_call_us = (time.perf_counter() - _t0) / _n * 1e6
"""
PUBLISH_SETUP = "from ipyparallel.datapub import publish_data"
PUBLISH_CALL = 'publish_data({"step": _i, "loss": 0.5, "time": time.time()})'
REPORT_CALL = "report(step=_i, loss=0.5, samples=64)"

LATENCY_PUBLISH = """
import time
from ipyparallel.datapub import publish_data
for _i in range({n}):
    publish_data({{"step": _i, "time": time.time()}})
    time.sleep({gap})
"""


class CollectorProbe:
    """Records (receive time - record time) for each record the collector hands over."""

    def __init__(self) -> None:
        from dist_notebook.metrics.series import RunMetrics

        self.ms: list[float] = []
        self.active = False
        original = RunMetrics.add
        probe = self

        def add(metrics: Any, records: list[Any]) -> None:
            if probe.active:
                now = time.time()
                probe.ms.extend((now - r.time) * 1e3 for r in records if r.step is not None)
            original(metrics, records)

        RunMetrics.add = add  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1 if common.quick() else 3)
    parser.add_argument("--steps", type=int, default=120 if common.quick() else 400)
    parser.add_argument("--records", type=int, default=400, help="records for the latency runs")
    args = parser.parse_args()

    common.use_scratch_store()
    probe = CollectorProbe()
    ip = common.shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    common.quietly(ip.run_line_magic, "dist_cluster", "start -n 2 --cpu --threads 1")

    def pull(expr: str) -> Any:
        return common.quietly(ip.run_line_magic, "dist_pull", f"{expr} --all")[0]

    def dist(code: str) -> None:
        _, out = common.quietly(ip.run_cell_magic, "dist", "", code)

    def train(code: str, steps: int, dashboard: bool = True) -> None:
        line = f"--steps {steps}" + ("" if dashboard else " --no-dashboard")
        common.quietly(ip.run_cell_magic, "dist_train", line, code)
        # The cell shows the run's end and returns nothing; the magics keep the result.
        result = ip.magics_manager.registry["TrainMagics"].last_result
        if result is None or result.state.value != "succeeded":
            raise RuntimeError(f"the %%dist_train run did not succeed: {result}")

    try:
        # 1. per call
        per_call: dict[str, list[float]] = {"report": [], "publish_data": []}
        for _ in range(args.reps):
            train(PER_CALL.format(setup="from dist_notebook import report", call=REPORT_CALL), 2000)
            per_call["report"] += list(pull("per_call_us").values())
            dist(PER_CALL.format(setup=PUBLISH_SETUP, call=PUBLISH_CALL))
            per_call["publish_data"] += list(pull("per_call_us").values())

        # 2. throughput, interleaved
        base = loop_code("mlp", args.steps, 20, 64, reporting=False)
        with_report = loop_code("mlp", args.steps, 20, 64, reporting=True)
        with_publish = ("from ipyparallel.datapub import publish_data\n" + base).replace(
            "    opt.step()\n",
            "    opt.step()\n"
            '    publish_data({"step": i, "loss": float(loss), "time": time.time()})\n',
        )
        runs: dict[str, list[float]] = {
            "none": [],
            "report": [],
            "report_no_dashboard": [],
            "publish_data": [],
        }
        for rep in range(args.reps):
            for mode in common.interleave(list(runs), rep):
                if mode.startswith("report"):
                    probe.active = True
                    train(with_report, args.steps + 20, mode == "report")
                    probe.active = False
                else:
                    dist(with_publish if mode == "publish_data" else base)
                runs[mode].append(samples_per_s(pull("bench_result")[0]))
                print(f"rep {rep + 1} {mode}: {runs[mode][-1]:,.0f} samples/s", flush=True)

        # 3. publish_data latency: poll AsyncResult.data from the kernel
        cluster = _cluster(ip)
        view = cluster.client[cluster.engine_ids()]
        ar = view.execute(LATENCY_PUBLISH.format(n=args.records, gap=0.002), block=False)
        seen: dict[int, set[int]] = {}
        pub_ms: list[float] = []
        while not ar.ready():
            now = time.time()
            for idx, d in enumerate(ar.data if isinstance(ar.data, list) else [ar.data]):
                if d and d.get("step") is not None and d["step"] not in seen.setdefault(idx, set()):
                    seen[idx].add(d["step"])
                    pub_ms.append((now - d["time"]) * 1e3)
            time.sleep(0.001)
        ar.get()
        seen_share = sum(len(s) for s in seen.values()) / (args.records * len(view))
    finally:
        common.quietly(ip.run_line_magic, "dist_cluster", "stop")

    none_med = statistics.median(runs["none"])
    report = {
        "per_call_us": {k: common.stats(v) for k, v in per_call.items()},
        "throughput": {
            k: {**common.stats(v), "vs_none": statistics.median(v) / none_med}
            for k, v in runs.items()
        },
        "latency_ms": {
            "report": {
                "p50": common.percentile(probe.ms, 50),
                "p95": common.percentile(probe.ms, 95),
                "n": len(probe.ms),
                "seen_share": 1.0,
            },
            "publish_data": {
                "p50": common.percentile(pub_ms, 50),
                "p95": common.percentile(pub_ms, 95),
                "n": len(pub_ms),
                "seen_share": seen_share,
            },
        },
    }
    for k, v in report["throughput"].items():
        print(f"{k:13s} {v['median']:,.0f} samples/s  x{v['vs_none']:.3f}")
    for k, v in report["latency_ms"].items():
        print(
            f"{k:13s} latency p50 {v['p50']:.2f} ms p95 {v['p95']:.2f} ms, "
            f"seen {v['seen_share']:.0%}"
        )
    common.write_result(
        "metrics_overhead",
        {
            "what": "one record per step: report() over ZMQ vs ipyparallel publish_data; "
            "MLP loop, 2 ranks, 1 thread",
            "config": {"reps": args.reps, "steps": args.steps, "records": args.records},
            **report,
        },
    )


def _cluster(ip: Any) -> Any:
    from dist_notebook.magics.session import Session

    cluster = Session.for_shell(ip).cluster
    assert cluster is not None
    return cluster


if __name__ == "__main__":
    main()
