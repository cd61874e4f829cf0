"""Ray-placed ranks' ``%%dist_train`` throughput vs the same loop on local ranks.

    python -m bench run ray_train                  # 2 CPU ranks, 5 repetitions
    python -m bench run ray_train --reps 1 --scale 0.3

A Ray head on loopback (4 CPUs: ``ray_start.ray_head``) runs for the whole measurement.
One child process is the notebook: an IPython shell with ``%load_ext dist_notebook`` and
two clusters started once, both with ``--threads 1`` (one thread a rank, on 2 cores):

  ray     ``%dist_cluster start -n 2 --cpu --launcher ray --address HEAD``: each rank
          the engine of a Ray actor of a placement group
  local   ``%dist_cluster start -n 2 --cpu``: the default launcher

The same ``%%dist_train`` loop (``throughput.loop_code``: the MLP, batch 64 a rank,
``report()`` every step) runs on each in turn, interleaved (A B, B A, ...): the other
cluster idles meanwhile, and the Ray head runs under both. Only the loop is timed,
inside it on rank 0, after warm-up steps and a barrier; samples/s of every rank
together. Writes ``bench/results/ray_train.json`` and ``ray_train.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench import common
from bench.ray_start import ray_head
from bench.throughput import STEPS, loop_code, samples_per_s

WAYS = ["ray", "local"]


def child(address: str, reps: int, cfg: dict[str, Any]) -> None:
    from dist_notebook.magics.session import Session

    ip = common.shell()
    ip.run_line_magic("load_ext", "dist_notebook")
    session = Session.for_shell(ip)
    clusters: dict[str, Any] = {}
    for way in WAYS:
        flags = "start -n 2 --cpu --threads 1"
        if way == "ray":
            flags += f" --launcher ray --address {address}"
        session.cluster = None  # the other one stays up, not current
        _, out = common.quietly(ip.run_line_magic, "dist_cluster", flags)
        if session.cluster is None or session.cluster.state.value != "ready":
            raise RuntimeError(f"{way}: the cluster did not start: {out.stdout[-1500:]}")
        clusters[way] = session.cluster
    raw: dict[str, list[float]] = {w: [] for w in WAYS}
    code = loop_code(**cfg, reporting=True)
    steps = cfg["warmup"] + cfg["steps"]
    try:
        for rep in range(reps):
            for way in common.interleave(WAYS, rep):
                session.cluster = clusters[way]
                common.quietly(
                    ip.run_cell_magic, "dist_train", f"--steps {steps} --no-dashboard", code
                )
                result = ip.magics_manager.registry["TrainMagics"].last_result
                if result is None or result.state.value != "succeeded":
                    raise RuntimeError(f"{way}: the %%dist_train run did not succeed: {result}")
                value, _ = common.quietly(ip.run_line_magic, "dist_pull", "bench_result")
                res = value[0] if isinstance(value, list) else value
                raw[way].append(samples_per_s(res))
                print(f"rep {rep + 1} {way}: {raw[way][-1]:,.0f} samples/s", flush=True)
                time.sleep(0.5)
    finally:
        for cluster in clusters.values():
            cluster.stop_sync()
    print("BENCH_RESULT " + json.dumps(raw), flush=True)


def table(results: dict[str, Any], ratios: dict[str, Any], reps: int) -> str:
    rows = []
    for way, s in results.items():
        span = f"{common.fmt(s.get('min'), 0)}-{common.fmt(s.get('max'), 0)}"
        rows.append([way, 2, common.fmt(s.get("median"), 0), span, s.get("n", 0)])
    text = common.md_table(["ranks", "n", "samples/s, median", "range", "runs"], rows)
    if ratios.get("n"):
        text += (
            f"\n\nray / local, rep by rep: median {ratios['median']:.3f}"
            f" ({ratios['min']:.3f}-{ratios['max']:.3f}; {reps} runs each, interleaved)"
        )
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1 if common.quick() else 5)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--scale", type=float, default=0.3 if common.quick() else 1.0)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--address", default="")
    parser.add_argument("--config", default="")
    args = parser.parse_args()
    cfg = {
        "model": "mlp",
        "steps": int(STEPS["mlp"] * args.scale),
        "warmup": args.warmup,
        "batch": args.batch,
    }
    if args.child:
        child(args.address, args.reps, json.loads(args.config))
        return
    with ray_head() as (address, env):
        cmd = common.module_cmd(
            "ray_train", "--child", "--address", address, "--reps", str(args.reps)
        )
        cmd += ["--config", json.dumps(cfg)]
        done = common.run_child(cmd, env=env, timeout=args.timeout)
    print(done.stdout, end="", flush=True)
    if done.returncode != 0:
        raise SystemExit(
            f"the measuring child failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
        )
    raw = common.result_line(done.stdout)
    results = {w: common.stats(v) for w, v in raw.items()}
    ratios = common.stats([r / lo for r, lo in zip(raw["ray"], raw["local"], strict=True)])
    text = table(results, ratios, args.reps)
    print(text)
    (common.RESULTS / "ray_train.md").write_text(text + "\n")
    common.write_result(
        "ray_train",
        {
            "ranks": 2,
            "reps": args.reps,
            "loop": cfg,
            "samples_per_s": raw,
            "results": results,
            "ray_over_local": ratios,
            "ray": common.package_version("ray"),
        },
    )


if __name__ == "__main__":
    main()
