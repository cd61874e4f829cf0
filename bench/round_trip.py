"""Cell round trip on 2 and 4 ranks: an empty cell through each tool's cell magic.

    python -m bench run round_trip                  # 2 and 4 ranks, 40 rounds a side
    python -m bench run round_trip --ranks 2 --iterations 20

One IPython shell holds the three tools at once, each with its own N processes:

  dist_notebook   ``%%dist`` (cluster from ``%dist_cluster start -n N --cpu``)
  ipyparallel     ``%%px`` (``ipp.Cluster(n=N)``, ``rc[:].activate()``)
  nbdistributed   ``%%distributed`` (``%dist_init -n N``)

Each round calls the three magics' functions directly with an empty cell (IPython's
``run_cell_magic`` refuses an empty body), every call inside the same output capture,
interleaved (A B C, C B A, ...). Medians and p90. Writes ``bench/results/round_trip.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from bench import common
from bench.cold_start import nbdistributed_stop, nbdistributed_wait_ready

SIDES = ["dist_notebook", "ipyparallel", "nbdistributed"]


def measure(ip: Any, n: int, iterations: int, warmup: int) -> dict[str, Any]:
    import ipyparallel as ipp
    from IPython.utils.capture import capture_output

    calls: dict[str, Any] = {}
    errors: dict[str, str] = {}
    ipp_cluster = None
    try:
        common.quietly(ip.run_line_magic, "dist_cluster", f"start -n {n} --cpu")
        dist_magic = ip.find_cell_magic("dist")
        calls["dist_notebook"] = lambda: dist_magic("", "")

        ipp_cluster = ipp.Cluster(n=n, log_level=40)
        rc = ipp_cluster.start_and_connect_sync()
        rc.wait_for_engines(n, timeout=120)
        view = rc[:]
        view.block = True  # %%px waits for the engines, as in an interactive notebook
        view.activate()  # registers %%px for this view
        px = ip.find_cell_magic("px")
        calls["ipyparallel"] = lambda: px("", "")

        try:
            # nbdistributed picks its ports, frees them, and binds them 2 s later: with other
            # clusters starting in the same shell that can collide. A user would re-run.
            for attempt in range(3):
                _, out = common.quietly(ip.run_line_magic, "dist_init", f"-n {n}")
                if "Successfully started" in out.stdout:
                    break
                nbdistributed_stop(ip)
                if attempt == 2:
                    raise RuntimeError(out.stdout.strip().splitlines()[-1])
            nbdistributed_wait_ready(ip, n)
            nbd = ip.find_cell_magic("distributed")
            calls["nbdistributed"] = lambda: nbd("", "")
        except Exception as e:  # recorded in the table, not dropped
            errors["nbdistributed"] = f"{type(e).__name__}: {e}"

        times: dict[str, list[float]] = {s: [] for s in calls}
        for i in range(warmup + iterations):
            for side in common.interleave(list(calls), i):
                with capture_output():
                    t0 = time.perf_counter()
                    calls[side]()
                    dt = time.perf_counter() - t0
                if i >= warmup:
                    times[side].append(dt * 1e3)
    finally:
        common.quietly(ip.run_line_magic, "dist_cluster", "stop")
        nbdistributed_stop(ip)
        if ipp_cluster is not None:
            ipp_cluster.stop_cluster_sync()
    out: dict[str, Any] = {}
    for side in SIDES:
        s = common.stats(times.get(side, []))
        if side in errors:
            s["error"] = errors[side]
        out[side] = s
    ref = out["ipyparallel"].get("median")
    for side in SIDES:
        if ref and out[side].get("median"):
            out[side]["vs_px"] = out[side]["median"] / ref
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--iterations", type=int, default=15 if common.quick() else 60)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()

    common.use_scratch_store()
    os.environ["PATH"] = common.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    ip = common.shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    ip.run_line_magic("load_ext", "nbdistributed")
    results = {}
    for n in (int(x) for x in args.ranks.split(",")):
        results[str(n)] = measure(ip, n, args.iterations, args.warmup)
        for side, s in results[str(n)].items():
            line = (
                f"median {s['median']:.2f} ms, p90 {s['p90']:.2f} ms"
                if s.get("median")
                else s.get("error")
            )
            print(f"n={n} {side:14s} {line}", flush=True)
    common.write_result(
        "round_trip",
        {
            "what": "milliseconds for an empty cell through each tool's cell magic, "
            "same shell, interleaved",
            "iterations": args.iterations,
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
