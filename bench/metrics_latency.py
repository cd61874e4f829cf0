"""The metrics path alone: what one report() costs on a rank, and how soon the kernel has it.

    python -m bench run metrics_latency                    # 2 ranks, 2000 records each
    python -m bench run metrics_latency --records 10000

For each rate (a record every 1 ms, and as fast as the rank can send), both ranks of a
2-rank CPU cluster call report() in a ``%%dist_train --no-dashboard`` run, timing each
call on the rank. The kernel notes ``time.time()`` when the collector hands each record
to RunMetrics (a hook of this benchmark only) and compares it with the record's own time,
set by report(). For reference, the same loop calls ipyparallel's ``publish_data``, the
path the design rejected. Writes ``bench/results/metrics_latency.json`` and prints a
markdown table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common

RESULTS = common.RESULTS / "metrics_latency.json"

SEND = """
import time
from dist_notebook import report
send_cost = []
for i in range({records}):
    t = time.perf_counter()
    report(step=i, loss=0.5, samples=1)
    send_cost.append(time.perf_counter() - t)
    if {pause}:
        # Busy-wait: sleep() on a loaded machine oversleeps by more than the pause.
        until = time.perf_counter() + {pause}
        while time.perf_counter() < until:
            pass
"""

PUBLISH = """
import time
from ipyparallel.datapub import publish_data
publish_cost = []
for i in range({records}):
    t = time.perf_counter()
    publish_data({{"step": i, "loss": 0.5, "samples": 1}})
    publish_cost.append(time.perf_counter() - t)
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summary(values: list[float], scale: float) -> dict[str, float]:
    return {
        "p50": pct(values, 50) * scale,
        "p95": pct(values, 95) * scale,
        "max": max(values) * scale,
        "n": len(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000, help="records per rank per rate")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    store_dir = tempfile.TemporaryDirectory()
    os.environ["DIST_NOTEBOOK_STORE"] = str(Path(store_dir.name) / "runs.sqlite")
    from IPython.testing.globalipapp import start_ipython
    from IPython.utils.capture import capture_output

    from dist_notebook.metrics.series import RunMetrics

    arrivals: list[float] = []
    add = RunMetrics.add

    def timed_add(metrics: Any, records: list[Any]) -> None:
        now = time.time()
        arrivals.extend(now - r.time for r in records)
        add(metrics, records)

    RunMetrics.add = timed_add  # type: ignore[method-assign]
    ip = start_ipython()
    ip.run_line_magic("load_ext", "dist_notebook")
    with capture_output():
        ip.run_line_magic("dist_cluster", "start -n 2 --cpu --threads 1")
    results: dict[str, Any] = {
        "config": {"records_per_rank": args.records, "ranks": 2, "cpus": os.cpu_count()},
        "rates": {},
    }
    try:
        for label, pause in (("1 per ms", 0.001), ("as fast as possible", 0.0)):
            arrivals.clear()
            with capture_output():
                ip.run_cell_magic(
                    "dist_train", "--no-dashboard", SEND.format(records=args.records, pause=pause)
                )
                # The cell returns nothing; the magics keep the run's result.
                run = ip.magics_manager.registry["TrainMagics"].last_result
                costs = ip.run_line_magic("dist_pull", "--all send_cost")
            sent = [c for per_rank in costs.values() for c in per_rank]
            results["rates"][label] = {
                "report_call_us": summary(sent, 1e6),
                "report_to_collector_ms": summary(arrivals, 1e3),
                "received": run.records,
                "sent": 2 * args.records,
                "wall_s": run.ended - run.started,
            }
            print(f"{label}: {run.records}/{2 * args.records} received", flush=True)
        with capture_output():
            ip.run_cell_magic("dist", "", PUBLISH.format(records=args.records))
            costs = ip.run_line_magic("dist_pull", "--all publish_cost")
        results["publish_data_call_us"] = summary([c for v in costs.values() for c in v], 1e6)
    finally:
        with capture_output():
            ip.run_line_magic("dist_cluster", "stop")
        store_dir.cleanup()

    common.write_result("metrics_latency", results, path=args.out)
    rows = [
        "| rate | report() us p50 / p95 | report -> collector ms p50 / p95 / max | received |",
        "|---|---:|---:|---:|",
    ]
    for label, r in results["rates"].items():
        c, lat = r["report_call_us"], r["report_to_collector_ms"]
        rows.append(
            f"| {label} | {c['p50']:.1f} / {c['p95']:.1f} | "
            f"{lat['p50']:.2f} / {lat['p95']:.2f} / {lat['max']:.1f} | "
            f"{r['received']}/{r['sent']} |"
        )
    pub = results["publish_data_call_us"]
    rows.append(f"| publish_data (reference) | {pub['p50']:.1f} / {pub['p95']:.1f} | - | - |")
    print("\n" + "\n".join(rows) + f"\n\nwritten to {args.out}")


if __name__ == "__main__":
    main()
