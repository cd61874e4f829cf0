"""What ``%%dist_train --tensorboard`` (and ``--mlflow``) cost, side by side, and how long
an export of a stored run takes.

    python -m bench run export_overhead          # 5 repetitions, 600 timed steps, --mlflow
    python -m bench run export_overhead --reps 7 # MLflow's live cost too
    python -m bench run export_overhead --records 100000   # export a 100,000-record run

Live: the same DDP loop as bench/train_overhead.py (an MLP of 256-wide layers, batch 64 a
rank, 2 ranks, 1 thread each, ``report()`` every step) as ``%%dist_train --no-dashboard``
(off), with ``--tensorboard DIR`` (tb) and, with ``--mlflow``, with ``--mlflow`` (ml). The
modes run interleaved (off tb ml, then ml tb off, ...) so drift in the machine's load falls
on all of them; only the loop is timed, on rank 0. Each repetition's tb/off ratio is
reported with the median, so the spread shows beside the median.

After the fact: a synthetic run of ``--records`` records (2 ranks; loss, acc and the
system fields) written to a scratch run store, then ``load_run(...).to_tensorboard(DIR)``
timed, and ``.to_mlflow()`` on ``--mlflow-records`` records (MLflow's file store takes
about 1 ms a metric on this machine, so 100,000 records would take minutes).

Writes ``bench/results/export_overhead.json`` and prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import interleave, md_table, stats, use_scratch_store, write_result
from bench.train_overhead import Notebook, loop_code, samples_per_s

LABELS = {
    "off": "%%dist_train, report() every step",
    "tb": "... --tensorboard DIR",
    "ml": "... --mlflow",
}


def probe_exporters() -> list[dict[str, Any]]:
    """Record each exporter's CPU time and records when it closes (this benchmark only)."""
    from dist_notebook.export.worker import ExportWorker

    seen: list[dict[str, Any]] = []
    close = ExportWorker.close

    def closing(worker: ExportWorker, *args: Any, **kwargs: Any) -> None:
        close(worker, *args, **kwargs)
        seen.append({"cpu_s": worker.cpu_s, "records": worker.written, "failed": worker.failed})

    ExportWorker.close = closing  # type: ignore[method-assign]
    return seen


def run_mode(
    nb: Notebook, args: argparse.Namespace, mode: str, scratch: Path
) -> tuple[float, float]:
    flags = f"--no-dashboard --steps {args.warmup + args.steps}"
    if mode == "tb":
        flags += f" --tensorboard {scratch / 'tb'}"
    elif mode == "ml":
        flags += " --mlflow"
    magics = nb.ip.magics_manager.registry["TrainMagics"]
    nb.quietly(nb.ip.run_cell_magic, "dist_train", flags, loop_code(args, True))
    result = magics.last_result
    if result is None or result.state.value != "succeeded":
        raise RuntimeError(f"the {mode} run did not succeed: {result}")
    res = nb.pull_result()
    assert res["threads"] == 1, res
    return samples_per_s(res), result.ended - result.started


def live(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    modes = ["off", "tb"] + (["ml"] if args.mlflow else [])
    nb = Notebook(args.ranks)
    results: dict[str, list[float]] = {m: [] for m in modes}
    shares: dict[str, list[float]] = {m: [] for m in modes[1:]}
    closed = probe_exporters()
    try:
        for rep in range(args.reps):
            for mode in interleave(modes, rep):
                rate, wall = run_mode(nb, args, mode, scratch)
                results[mode].append(rate)
                line = f"rep {rep + 1} ({mode}) {rate:,.0f} samples/s"
                if mode != "off":
                    export = closed.pop()
                    assert export["failed"] is None, export
                    shares[mode].append(export["cpu_s"] / wall)
                    line += f"; exporter {export['cpu_s'] * 1000:.0f} ms CPU in {wall:.1f} s"
                print(line, flush=True)
    finally:
        nb.stop()
    out: dict[str, Any] = {m: stats(v) for m, v in results.items()}
    for m, v in shares.items():
        out[f"{m}_exporter_cpu_share"] = stats(v)
    for m in modes[1:]:
        pairs = [a / b for a, b in zip(results[m], results["off"], strict=True)]
        out[f"{m}/off"] = stats(pairs)
    return out


def exporter_alone(scratch: Path, seconds: float = 6.0, every: float = 0.02) -> dict[str, Any]:
    """The TensorBoard exporter's own CPU time, fed 2 records every *every* seconds as the
    collector feeds it (no cluster: the same worker and target a run uses)."""
    from dist_notebook.export.base import RunInfo
    from dist_notebook.export.tensorboard import TensorBoardTarget
    from dist_notebook.export.worker import ExportWorker
    from dist_notebook.protocol import Record

    info = RunInfo(run_id="alone0000000", name="alone", ranks=(0, 1), world_size=2)
    worker = ExportWorker(TensorBoardTarget(info, scratch / "alone"))
    start, step = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        worker([Record(r, step, time.time(), 0.01, 0.002, 64.0, {"loss": 1.0}) for r in (0, 1)])
        step += 1
        time.sleep(every)
    worker.close("succeeded")
    return {
        "records": worker.written,
        "cpu_s": worker.cpu_s,
        "us_per_record": worker.cpu_s / worker.written * 1e6,
        "wall_s": seconds,
    }


def synthetic_run(path: Path, records: int) -> str:
    """A stored run of *records* records over 2 ranks, written as the collector does."""
    from dist_notebook.protocol import Record
    from dist_notebook.store import StoreWriter

    writer = StoreWriter(path)
    run_id = f"bench{records}"
    writer.add_cluster(
        "bench", n=2, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    writer.add_run(run_id, name=run_id, cluster_id="bench", ranks=[0, 1], steps=None, code="pass")
    now = time.time()
    batch = []
    for i in range(records):
        step, rank = divmod(i, 2)
        metrics = {"loss": 1.0 / (step + 1), "acc": step / (records / 2)}
        batch.append(Record(rank, step, now + step * 0.01, 0.01, 0.002, 64.0, metrics=metrics))
        if len(batch) == 10_000:
            writer.append_metrics(run_id, batch)
            batch = []
    writer.append_metrics(run_id, batch)
    writer.set_run_state(run_id, "running")
    writer.set_run_state(run_id, "succeeded")
    writer.close()
    return run_id


def after_the_fact(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    from dist_notebook import load_run

    store = scratch / "export.sqlite"
    out: dict[str, Any] = {}
    run_id = synthetic_run(store, args.records)
    run = load_run(run_id, store)
    t0 = time.perf_counter()
    run.records()
    out["read_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    run.to_tensorboard(scratch / "tb-export")
    out["tensorboard_s"] = time.perf_counter() - t0
    out["records"] = args.records
    if args.mlflow_records:
        small = load_run(synthetic_run(store, args.mlflow_records), store)
        os.environ["MLFLOW_TRACKING_URI"] = (scratch / "mlruns").as_uri()
        t0 = time.perf_counter()
        small.to_mlflow()
        out["mlflow_s"] = time.perf_counter() - t0
        out["mlflow_records"] = args.mlflow_records
    return out


def tables(result: dict[str, Any]) -> str:
    rows = []
    live_ = result["live"]
    for mode, label in LABELS.items():
        if mode not in live_:
            continue
        s = live_[mode]
        ratio = live_.get(f"{mode}/off")
        spread = f"{ratio['median']:.3f} ({ratio['min']:.3f}-{ratio['max']:.3f})" if ratio else "1"
        runs = ", ".join(f"{v:,.0f}" for v in s["values"])
        cpu = live_.get(f"{mode}_exporter_cpu_share")
        cpu_text = f"{cpu['median'] * 100:.2f}% ({cpu['max'] * 100:.2f}%)" if cpu else "-"
        rows.append([f"({mode}) {label}", f"{s['median']:,.0f}", runs, spread, cpu_text])
    head = [
        "mode",
        "samples/s (median)",
        "runs",
        "vs off: median (min-max of pairs)",
        "exporter CPU / run wall time: median (max)",
    ]
    out = md_table(head, rows)
    e = result["export"]
    rows = [
        [f"read {e['records']:,} records from the store", f"{e['read_s']:.2f} s"],
        [
            f"load_run(...).to_tensorboard(DIR), {e['records']:,} records",
            f"{e['tensorboard_s']:.2f} s",
        ],
    ]
    if "mlflow_s" in e:
        rows.append(
            [
                f"load_run(...).to_mlflow(), {e['mlflow_records']:,} records",
                f"{e['mlflow_s']:.2f} s",
            ]
        )
    a = result["alone"]
    rows.append(
        [
            f"live exporter alone: {a['records']:,} records in {a['wall_s']:.0f} s, CPU",
            f"{a['cpu_s'] * 1000:.0f} ms ({a['us_per_record']:.0f} us a record)",
        ]
    )
    return out + "\n\n" + md_table(["export", "time"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each mode")
    parser.add_argument("--steps", type=int, default=600, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps first")
    parser.add_argument("--batch", type=int, default=64, help="batch per rank")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--mlflow", action="store_true", help="also --mlflow live (mode ml)")
    parser.add_argument("--records", type=int, default=100_000, help="records of the export")
    parser.add_argument("--mlflow-records", type=int, default=10_000, help="0: no MLflow export")
    parser.add_argument("--no-live", action="store_true", help="only the export after the fact")
    args = parser.parse_args()
    use_scratch_store()
    with tempfile.TemporaryDirectory(prefix="dist-export-bench-") as tmp:
        scratch = Path(tmp)
        os.environ.setdefault("MLFLOW_TRACKING_URI", (scratch / "mlruns").as_uri())
        result = {
            "config": {k: v for k, v in vars(args).items()},
            "live": {} if args.no_live else live(args, scratch),
            "export": after_the_fact(args, scratch),
            "alone": exporter_alone(scratch),
        }
    write_result("export_overhead", result)
    print()
    print(tables(result))
    med = statistics.median
    if "tb/off" in result["live"]:
        print(f"\ntb/off = {med(result['live']['tb/off']['values']):.3f} (target >= 0.995)")


if __name__ == "__main__":
    main()
