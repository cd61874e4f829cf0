"""Dispatch overhead of ``%%dist``: an empty cell through the magic vs raw ipyparallel.

    python -m bench run dispatch                       # 2 and 4 ranks, 100 rounds each
    python -m bench run dispatch --ranks 2 --iterations 50

Both sides run on the SAME engines of one cluster, interleaved A B A B so that load
from other processes falls on both alike:

  A  ``%%dist`` with an empty cell, called the way IPython calls a cell magic
     (``run_cell_magic`` refuses an empty body, so the magic's function is called
     directly with ``line=""`` and ``cell=""``): argument parsing, rank checks,
     ``run_on_ranks`` with the streaming sink, result folding.
  B  ``client[ids].execute("", block=True)``: ipyparallel's own blocking execute
     (``silent=True`` by default).
  C  the same with ``silent=False``, as ``%%dist`` sends it: the engine then runs the
     cell as a notebook cell (execute_input and execute_result published, the
     execution count advanced, pre/post-execute hooks run, which matplotlib's inline
     backend needs). C - B is the cost of that, C vs A is the magic's own cost.

Prints a table of median and p90 round trips and the ratio A/B, and writes
``bench/results/dispatch.json``. Target: median ratio <= 1.05 (issue 14).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.common import quick, quietly, shell, stats, use_scratch_store, write_result

TARGET = 1.05


def summary(seconds: list[float]) -> dict[str, float]:
    ms = stats([s * 1e3 for s in seconds])
    return {"median_ms": ms["median"], "p90_ms": ms["p90"], "min_ms": ms["min"]}


def measure(ip: Any, n: int, iterations: int, warmup: int) -> dict[str, Any]:
    from dist_notebook.magics.session import Session

    quietly(ip.run_line_magic, "dist_cluster", f"start -n {n} --cpu")
    cluster = Session.for_shell(ip).cluster
    try:
        magic = ip.find_cell_magic("dist")
        view = cluster.client[cluster.engine_ids()]

        def through_magic() -> None:
            magic("", "")

        def raw() -> None:
            view.execute("", block=True)

        def raw_loud() -> None:
            view.execute("", silent=False, block=True)

        sides = (("magic", through_magic), ("raw", raw), ("raw_loud", raw_loud))
        for _ in range(warmup):
            for _name, fn in sides:
                fn()
        times: dict[str, list[float]] = {name: [] for name, _ in sides}
        for i in range(iterations):
            # Alternate the order, so no side always follows the same other side.
            for name, fn in sides if i % 2 == 0 else reversed(sides):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    finally:
        quietly(ip.run_line_magic, "dist_cluster", "stop")
    magic_s, raw_s = summary(times["magic"]), summary(times["raw"])
    loud_s = summary(times["raw_loud"])
    return {
        "ranks": n,
        "iterations": iterations,
        "magic": magic_s,
        "raw": raw_s,
        "raw_silent_false": loud_s,
        "ratio_median": magic_s["median_ms"] / raw_s["median_ms"],
        "ratio_p90": magic_s["p90_ms"] / raw_s["p90_ms"],
        "ratio_median_vs_silent_false": magic_s["median_ms"] / loud_s["median_ms"],
    }


def table(rows: list[dict[str, Any]]) -> str:
    cols = (
        "ranks",
        "A %%dist med/p90",
        "B raw med/p90",
        "C silent=False",
        "A/B med",
        "A/B p90",
        "A/C med",
    )
    lines = ["  ".join(f"{c:>16}" if i else f"{c:>5}" for i, c in enumerate(cols))]
    for r in rows:
        cells = [
            f"{r['ranks']:>5}",
            f"{r['magic']['median_ms']:6.2f}/{r['magic']['p90_ms']:6.2f} ms",
            f"{r['raw']['median_ms']:6.2f}/{r['raw']['p90_ms']:6.2f} ms",
            f"{r['raw_silent_false']['median_ms']:6.2f}/{r['raw_silent_false']['p90_ms']:6.2f} ms",
            f"{r['ratio_median']:15.2f}x",
            f"{r['ratio_p90']:15.2f}x",
            f"{r['ratio_median_vs_silent_false']:15.2f}x",
        ]
        lines.append("  ".join(f"{c:>16}" if i else c for i, c in enumerate(cells)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4", help="cluster sizes to measure, e.g. 2,4")
    parser.add_argument("--iterations", type=int, default=200, help="measured rounds per side")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured rounds per side")
    parser.add_argument("--quick", action="store_true", help="a smoke run (also BENCH_QUICK=1)")
    args = parser.parse_args(argv)
    if args.quick or quick():
        args.iterations, args.warmup = min(args.iterations, 20), min(args.warmup, 3)

    use_scratch_store()
    ip = shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    rows = [measure(ip, int(n), args.iterations, args.warmup) for n in args.ranks.split(",")]
    print()
    print("Round trip of an empty cell: %%dist vs client[ids].execute('', block=True)")
    print(table(rows))
    worst = max(r["ratio_median"] for r in rows)
    verdict = "within" if worst <= TARGET else "OVER"
    print(f"worst median ratio A/B {worst:.2f}x: {verdict} the {TARGET}x target")
    write_result(
        "dispatch",
        {
            "what": "empty-cell round trip: %%dist vs ipyparallel execute, same engines",
            "target_ratio": TARGET,
            "results": rows,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
