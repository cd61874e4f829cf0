"""What a kernel restart costs: attach to a detached cluster, or start the cluster again.

    python -m bench run detach               # 6 rounds
    python -m bench run detach --rounds 3    # (or BENCH_QUICK=1) fewer

Each round, interleaved, in a fresh process (as a restarted kernel is), timed from after
``import dist_notebook`` (which ``%load_ext`` costs either way): (a) attach to one
detached 2-rank CPU cluster, started once, and run a cell that reads a variable set on
the ranks before; (b) start a fresh 2-rank cluster (the fork server warm, as in a kernel
that loaded the extension) and run the same cell, which must first set the variable
again (here: a tensor; a real notebook would re-run its set-up cells and lose its model).
Prints a markdown table (median, p90, max of each side) and writes
``bench/results/detach.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.common import child_env, md_table, quick, stats, use_scratch_store, write_result

ROOT = Path(__file__).resolve().parents[1]

ATTACH = textwrap.dedent(
    """
    import json, time
    import dist_notebook
    from dist_notebook.detached.attached import AttachedCluster, find_keeper
    t0 = time.perf_counter()
    cluster = AttachedCluster.attach_file(find_keeper(None))
    client = cluster.require_ready()
    value = client[:].pull("kept", block=True)
    took = time.perf_counter() - t0
    cluster.detach()
    print("BENCH " + json.dumps({"s": took, "ok": [int(v.sum()) for v in value] == [7, 7]}))
    """
)

FRESH = textwrap.dedent(
    """
    import json, time
    from dist_notebook import ClusterSpec, DistCluster
    from dist_notebook.cluster import forkserver
    forkserver.prestart().wait_ready()
    t0 = time.perf_counter()
    cluster = DistCluster(ClusterSpec(n=2, threads=1)).start_sync()
    client = cluster.require_ready()
    client[:].execute("import torch; kept = torch.full((1,), 7)", block=True)
    value = client[:].pull("kept", block=True)
    took = time.perf_counter() - t0
    cluster.stop_sync()
    print("BENCH " + json.dumps({"s": took, "ok": [int(v.sum()) for v in value] == [7, 7]}))
    """
)


def one(code: str) -> float:
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env=child_env(threads=None),
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"a round failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(line[6:])
    if not result["ok"]:
        raise RuntimeError("the ranks did not hold the value")
    return float(result["s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3 if quick() else 10)
    args = parser.parse_args()
    use_scratch_store()
    from dist_notebook.cluster.spec import ClusterSpec
    from dist_notebook.detached.attached import start_detached

    cluster = start_detached(ClusterSpec(n=2, threads=1), None, progress=lambda _: None)
    try:
        cluster.require_ready()[:].execute("import torch; kept = torch.full((1,), 7)", block=True)
        cluster.detach()
        times: dict[str, list[float]] = {"attach": [], "fresh start": []}
        for i in range(args.rounds):
            for side in ("attach", "fresh start") if i % 2 == 0 else ("fresh start", "attach"):
                times[side].append(one(ATTACH if side == "attach" else FRESH))
    finally:
        from dist_notebook.detached.attached import AttachedCluster, find_keeper

        AttachedCluster.attach_file(find_keeper(cluster.id)).stop_sync()
    rows = []
    for side, values in times.items():
        st = stats(values)
        rows.append(
            [side, st["n"], f"{st['median']:.2f} s", f"{st['p90']:.2f} s", f"{st['max']:.2f} s"]
        )
    print(md_table(["after a kernel restart", "rounds", "median", "p90", "max"], rows))
    write_result("detach", {side: stats(v) for side, v in times.items()} | {"when": time.time()})


if __name__ == "__main__":
    main()
