"""``python -m bench run --all``: the registry's ``in_all`` benchmarks one after the other,
then one table (``make bench``).

    python -m bench run --all                  # the full set, ~15-20 minutes on 2 cores
    python -m bench run --all --quick          # a smoke run of every part, into a scratch folder
    python -m bench run --all --only memory,round_trip
    python -m bench run --all --table-only     # rebuild README.md from the JSON already there

Each part runs as its own process (so one part's clusters and imports never weigh on the
next) with a time budget; a part that fails or runs out of time is named in the table with
the reason, never dropped. The parts write ``bench/results/<name>.json``; this module folds
them, with the H200 table of ``gpu_h200.log``, into ``bench/results/README.md`` and prints
it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
from typing import Any

from bench import common
from bench.common import fmt, md_table
from bench.registry import BENCHMARKS, INSTALL_PEERS, Bench, missing

# The whole set must end within TOTAL_S: each part may use its budget only while the
# expected time of the parts still to come stays free; past that it is ended and named in
# the table.
PARTS: tuple[Bench, ...] = tuple(b for b in BENCHMARKS if b.in_all)
TOTAL_S = 24 * 60

README = common.RESULTS / "README.md"
# The GPU figures come from the GPU machine (`python -m bench run gpu`), never from a quick run.
GPU_LOG = common.HERE / "results" / "gpu_h200.log"

LABELS = {
    "dist_notebook": "dist-notebook",
    "dist_notebook_spawn": "dist-notebook, fork server off (each engine a new process)",
    "dist_notebook_next_cell": "dist-notebook, `start` a cell after `%load_ext` (from `start`)",
    "dist_notebook_warm": "dist-notebook, warm (a spare kept by the kernel; from `start`)",
    "torchrun": "torchrun",
    "accelerate": "accelerate `notebook_launcher`",
    "nbdistributed": "nbdistributed",
    "ipyparallel": "ipyparallel by hand",
    "single": "one process, no DDP",
    "dist_train": "dist-notebook `%%dist_train` + report() + dashboard",
}


def run_part(part: Bench, args: list[str], budget: int, env: dict[str, str]) -> dict[str, Any]:
    """Run one part in its own process group; on overrun end that group (and only it)."""
    name = part.name
    t0 = time.perf_counter()
    log = common.RESULTS / f".{name}.log"
    print(f"\n=== {name}: {part.target} {' '.join(args)} (budget {budget} s)", flush=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            common.module_cmd(part.module or name, *args),
            cwd=common.ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc: int | None = proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            # SIGTERM: the part ends as on Ctrl-C and stops the clusters it started
            # (common.stop_on_signals), then SIGKILL for what is left of its group.
            common.end_group(proc)
            rc = None
        except KeyboardInterrupt:
            # make bench interrupted (Ctrl-C, SIGTERM): the part is in a session of its
            # own and got no signal; stop it the same way before leaving.
            print(f"\n=== {name}: interrupted, stopping it", flush=True)
            common.end_group(proc)
            raise
    # Whatever the part left behind in its own group (engines of a failed start) goes too.
    common.end_group(proc, grace=0)
    seconds = time.perf_counter() - t0
    text = log.read_text(errors="replace")
    tail = [line for line in text.strip().splitlines() if line.strip()]
    print("\n".join(tail[-12:]), flush=True)
    log.unlink(missing_ok=True)
    if rc is None:
        status = f"ran past its {budget} s budget"
    elif rc != 0:
        status = f"failed (exit {rc}): {tail[-1][:200] if tail else 'no output'}"
    else:
        status = "ok"
    print(f"=== {name}: {status} in {seconds:.0f} s", flush=True)
    return {"status": status, "seconds": round(seconds, 1)}


def load(name: str, since: float | None) -> dict[str, Any] | None:
    path = common.RESULTS / f"{name}.json"
    if not path.exists() or (since is not None and path.stat().st_mtime < since):
        return None
    return json.loads(path.read_text())


# ---- the tables ----


def why(s: dict[str, Any]) -> str:
    err = str(s.get("error", "no result"))
    return "could not run: " + err.replace("|", "/").replace("\n", " ")[:160]


def section_cold(d: dict[str, Any]) -> str:
    sizes = sorted(d["results"], key=int)
    head = (
        ["way"]
        + [f"{n} ranks: median s (runs)" for n in sizes]
        + [f"{n} ranks vs torchrun" for n in sizes]
    )
    rows = []
    for m in d["results"][sizes[0]]:
        cells = []
        for n in sizes:
            s = d["results"][n][m]
            cells.append(
                f"{s['median']:.2f} ({', '.join(f'{v:.1f}' for v in s['values'])})"
                if s.get("median")
                else why(s)
            )
        cells += [fmt(d["results"][n][m].get("vs_torchrun"), 2, "x") for n in sizes]
        rows.append([LABELS.get(m, m)] + cells)
    text = md_table(head, rows)
    cpu = []
    for m in d["results"][sizes[0]]:
        per = [d["results"][n][m].get("cpu_seconds", {}).get("median") for n in sizes]
        if all(v is not None for v in per):
            cpu.append(f"{LABELS.get(m, m)} {' / '.join(f'{v:.1f}' for v in per)}")
    if d.get("note"):
        text += f"\n\n{d['reps']} run per cell: {d['note']}."
    if cpu:
        text += (
            f"\n\nCPU seconds per start ({' / '.join(sizes)} ranks, median; every process of "
            "the tree, its stop included): " + "; ".join(cpu) + "."
        )
    return text


def section_round_trip(d: dict[str, Any], dispatch: dict[str, Any] | None) -> str:
    sizes = sorted(d["results"], key=int)
    labels = {
        "dist_notebook": "`%%dist`",
        "ipyparallel": "ipyparallel `%%px`",
        "nbdistributed": "nbdistributed `%%distributed`",
    }
    head = (
        ["empty cell"]
        + [f"{n} ranks: median / p90 ms" for n in sizes]
        + [f"{n} ranks vs `%%px`" for n in sizes]
    )
    rows = []
    for side in d["results"][sizes[0]]:
        cells = []
        for n in sizes:
            s = d["results"][n][side]
            cells.append(f"{s['median']:.1f} / {s['p90']:.1f}" if s.get("median") else why(s))
        cells += [fmt(d["results"][n][side].get("vs_px"), 2, "x") for n in sizes]
        rows.append([labels.get(side, side)] + cells)
    text = md_table(head, rows)
    if dispatch:
        by_n = {str(r["ranks"]): r for r in dispatch["results"]}
        rows = []
        for label, key in (
            ("`%%dist` (magic function)", "magic"),
            ("`client[ids].execute('', block=True)`", "raw"),
            ("`client[ids].execute('', silent=False, block=True)`", "raw_silent_false"),
        ):
            if not any(key in r for r in by_n.values()):
                continue
            cells = [
                f"{by_n[n][key]['median_ms']:.1f} / {by_n[n][key]['p90_ms']:.1f}"
                if key in by_n.get(n, {})
                else "-"
                for n in sizes
            ]
            ratio = [
                f"{by_n[n][key]['median_ms'] / by_n[n]['raw']['median_ms']:.2f}x"
                if key in by_n.get(n, {})
                else "-"
                for n in sizes
            ]
            rows.append([label] + cells + ratio)
        text += (
            "\n\nThe same on one cluster's engines, `python -m bench run dispatch` "
            f"({dispatch['results'][0]['iterations']} rounds; "
            "ratio to raw ipyparallel execute):\n\n"
        )
        text += md_table(
            ["empty cell"]
            + [f"{n} ranks: median / p90 ms" for n in sizes]
            + [f"{n} ranks vs raw" for n in sizes],
            rows,
        )
    return text


def section_throughput(d: dict[str, Any], train: dict[str, Any] | None) -> str:
    models = list(d["results"])
    names = {"mlp": "MLP (synthetic)", "cnn": "CNN (sklearn digits)"}
    head = ["launcher"]
    for m in models:
        head += [f"{names.get(m, m)} samples/s median (min-max)", "vs torchrun"]
    rows = []
    for mode in d["results"][models[0]]:
        cells = []
        for m in models:
            s = d["results"][m][mode]
            spread = f"{fmt(s['median'], 0)} ({s['min']:,.0f}-{s['max']:,.0f})"
            cells += [spread if s.get("median") else why(s), fmt(s.get("vs_torchrun"), 3)]
        rows.append([LABELS.get(mode, mode)] + cells)
    cfg = d["config"]
    text = md_table(head, rows)
    text += (
        f"\n\nSteps timed per run: {cfg['steps']}, batch {cfg['batch_per_rank']} per rank, "
        f"{cfg['reps']} runs per cell (median); threads per rank seen: {cfg['threads_seen']}."
    )
    if train:
        modes = train["modes"]
        rows = [
            [
                label,
                fmt(modes[k]["median"], 0),
                ", ".join(f"{v:,.0f}" for v in modes[k]["samples_per_s"]),
                fmt(modes[k]["median"] / modes["b"]["median"], 3),
            ]
            for k, label in (
                ("a", "`%%dist_train` + report() + dashboard"),
                ("d", "`%%dist_train` + report(), no dashboard"),
                ("e", "`%%dist_train`, no report()"),
                ("c", "`%%dist`, no reporting"),
                ("b", "torchrun"),
            )
            # Only the modes that run measured (an older file may lack some).
            if k in modes
        ]
        text += (
            f"\n\n`python -m bench run train_overhead` (MLP, {train['config']['steps']} steps, "
            f"{train['config']['reps']} runs each):\n\n"
        )
        text += md_table(["mode", "samples/s median", "runs", "vs torchrun"], rows)
    return text


def section_metrics(
    d: dict[str, Any], train: dict[str, Any] | None, latency: dict[str, Any] | None = None
) -> str:
    rows = []
    for key, label in (
        ("report", "dist-notebook `report()` (ZMQ PUSH), dashboard drawing"),
        ("report_no_dashboard", "dist-notebook `report()`, `%%dist_train --no-dashboard`"),
        ("publish_data", "ipyparallel `publish_data`"),
    ):
        if key not in d["throughput"]:
            continue
        pc = d["per_call_us"][key.split("_no_")[0]]
        tp = d["throughput"][key]
        lat = d["latency_ms"][key.split("_no_")[0]]
        rows.append(
            [
                label,
                fmt(pc.get("median"), 1),
                fmt(tp["vs_none"], 3),
                fmt(lat["p50"], 2),
                fmt(lat["p95"], 2),
                f"{lat['seen_share']:.0%}",
            ]
        )
    rows.append(["no reporting", "-", "1.000", "-", "-", "-"])
    text = md_table(
        [
            "one record per step",
            "mean cost per call (us)",
            "throughput vs none",
            "latency p50 (ms)",
            "latency p95 (ms)",
            "records seen by the kernel",
        ],
        rows,
    )
    text += (
        f"\n\nMLP loop, 2 ranks, 1 thread each, {d['config']['steps']} steps, "
        f"{d['config']['reps']} runs a mode, interleaved. Latency: report() to the collector "
        "thread (pooled over both report() modes); publish_data to `AsyncResult.data` polled "
        "every 1 ms (it keeps only the latest value per engine)."
    )
    if train:
        lat = train["latency_ms"]
        text += "\n\nFrom `python -m bench run train_overhead`:\n\n" + md_table(
            ["latency (ms)", "p50", "p95", "n"],
            [
                [label, fmt(lat[k]["p50"]), fmt(lat[k]["p95"]), lat[k]["n"]]
                for k, label in (
                    ("collector", "report() -> collector"),
                    ("widget", "report() -> widget update"),
                    ("render", "one dashboard render"),
                )
            ],
        )
    if latency:
        rows = []
        for label, r in latency["rates"].items():
            c, lat = r["report_call_us"], r["report_to_collector_ms"]
            rows.append(
                [
                    f"report(), {label}",
                    f"{c['p50']:.1f} / {c['p95']:.1f}",
                    f"{lat['p50']:.2f} / {lat['p95']:.2f} / {lat['max']:.1f}",
                    f"{r['received']}/{r['sent']}",
                ]
            )
        pub = latency["publish_data_call_us"]
        rows.append(["publish_data (reference)", f"{pub['p50']:.1f} / {pub['p95']:.1f}", "-", "-"])
        text += (
            f"\n\nFrom `python -m bench run metrics_latency` "
            f"({latency['config']['records_per_rank']} records a rank, `--no-dashboard`):\n\n"
        )
        text += md_table(
            ["rate", "call us p50 / p95", "to collector ms p50 / p95 / max", "received"], rows
        )
    return text


def section_state(d: dict[str, Any]) -> str:
    r = d["results"]
    rows = [
        [
            "`%dist_push sd` (one shared-memory copy, mapped by every rank)",
            fmt(r["push"]["median"]),
            ", ".join(f"{v:.1f}" for v in r["push"]["values"]),
            fmt(r["push"]["gib_per_s_to_all"]),
            fmt(r["push"]["peak_ram_gib"], 1),
            fmt(r["push"].get("vs_broadcast"), 1, "x"),
        ],
        [
            "`dist.broadcast` from rank 0 in `%%dist` (gloo)",
            fmt(r["broadcast"]["median"]),
            ", ".join(f"{v:.1f}" for v in r["broadcast"]["values"]),
            fmt(r["broadcast"]["gib_per_s_to_all"]),
            fmt(r["broadcast"]["peak_ram_gib"], 1),
            "1.0x",
        ],
    ]
    if r.get("pull", {}).get("n"):
        rows.append(
            [
                "`%dist_pull sd --all` (every rank's copy back)",
                fmt(r["pull"]["median"]),
                ", ".join(f"{v:.1f}" for v in r["pull"]["values"]),
                fmt(r["pull"]["gib_per_s_to_all"]),
                fmt(r["pull"]["peak_ram_gib"], 1),
                fmt(r["pull"]["median"] / r["broadcast"]["median"], 1, "x"),
            ]
        )
    text = md_table(
        [
            "way",
            "median s",
            "runs",
            "GiB/s delivered (all ranks)",
            "peak extra RAM GiB",
            "vs broadcast",
        ],
        rows,
    )
    text += f"\n\n{d['what']}."
    if d.get("size_note"):
        text += f" Asked for {d['asked_mib']} MiB: {d['size_note']}."
    return text


def section_memory(d: dict[str, Any]) -> str:
    r = d["results"]
    rows = []
    for key, label in (
        ("dist_notebook", "dist-notebook engine (torch, gloo group, rank namespace)"),
        ("nbdistributed", "nbdistributed worker (torch, gloo group)"),
        ("bare_torch_gloo", "bare `import torch` + 1-rank gloo group"),
        ("bare_torch", 'bare `python -c "import torch; sleep"`'),
    ):
        v = r.get(key, {})
        if "rss_mib" not in v:
            rows.append([label, why(v), "", "", ""])
            continue
        allp = v.get("all_processes")
        rows.append(
            [
                label,
                fmt(v["rss_mib"], 0),
                fmt(v["uss_mib"], 0),
                fmt(v.get("uss_vs_bare", 1.0), 2, "x"),
                f"{allp['processes']} processes, USS {allp['uss_mib']:.0f} MiB" if allp else "-",
            ]
        )
    return md_table(
        ["process (per rank)", "RSS MiB", "USS MiB", "USS vs bare", "everything the tool started"],
        rows,
    )


def section_first_call(d: dict[str, Any]) -> str:
    rows = []
    for call, label in (("dist_train", "`%%dist_train` (50 steps)"), ("dist_pull", "`%dist_pull`")):
        r = d["results"][call]
        first, later = r["first"], r["later"]
        runs = ", ".join(f"{v:.2f}" for v in first["values"])
        spread = f"{fmt(later['min'], 2)}-{fmt(later['max'], 2)}"
        rows.append(
            [
                label,
                f"{fmt(first['median'], 3)} ({runs})",
                f"{fmt(later['median'], 3)} ({spread})",
                fmt(r["ratio"], 2, "x"),
            ]
        )
    text = md_table(
        ["call", "first: median s (runs)", "later: median s (min-max)", "first / later"], rows
    )
    return text + f"\n\n{d['what']}; {d['reps']} kernels."


def section_cpu_share(d: dict[str, Any]) -> str:
    from bench import cpu_share

    text = cpu_share.table(d)
    return text + (
        "\n\n`python -m bench run cpu_share`: CPU seconds of each thread over the run's wall "
        "seconds (0.010 is 1% of one core), medians of "
        f"{d['config']['reps']} runs of {d['config']['steps']} steps per mode, interleaved."
    )


def section_gpu() -> str:
    if not GPU_LOG.exists():
        return "(no `gpu_h200.log`)"
    text = GPU_LOG.read_text()
    lines = text.splitlines()
    head = lines[:2]
    # Each run of consecutive "|" lines is one table; keep them apart.
    tables, current = [], []
    for line in lines + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append("\n".join(current))
            current = []
    facts = [
        line.strip()
        for line in lines
        if line.startswith(("ranks:", "NVML sampler cost", "start:", "params:"))
        or re.match(r"^\d+ passed", line)
    ]
    out = f"`python -m bench run gpu` on {head[0].strip()} ({head[1].strip()}): GPT-small, bf16, "
    out += "batch 8 x 1024, one NCCL rank, "
    out += "`%%dist_train` with report() every step vs the same loop under torchrun.\n\n"
    out += "\n\n".join(tables)
    if facts:
        out += "\n\n" + "; ".join(facts) + "."
    return out


NOTES = {
    "cold_start": """
From spawning a fresh process (imports count for everyone) to the moment one all_reduce
over all ranks has completed. dist-notebook: `%load_ext dist_notebook`, `%dist_cluster
start -n N --cpu` then `%%dist`; the engines are forked from the fork server that
`%load_ext` starts (torch and ipyparallel imported once, not once per rank); "fork server
off" spawns each engine (`DIST_NOTEBOOK_FORKSERVER=0`); "a cell after" times from
`start` once the server has its imports done, as when `%load_ext` ran in an earlier cell.
torchrun: `--standalone` on a script. accelerate: `notebook_launcher(fn,
num_processes=N, use_port=<free>)` from an IPython shell (on CPU it forks the kernel
through torch's elastic_launch; fn creates the gloo group). nbdistributed: `%dist_init -n
N` then `%%distributed`; `%dist_init` returns after a fixed 2 s sleep, before its workers
connect, and a cell sent then is dropped and times out after 30 s, so the workers are
probed every 0.25 s until they answer (the earliest a cell can succeed). ipyparallel by
hand: `ipp.Cluster(n=N).start_and_connect_sync()`, rank env vars and
`init_process_group` applied on each engine, then the all_reduce.""",
    "round_trip": """
One IPython shell holding all three tools, each with its own N processes; each magic's
function called with an empty cell inside the same output capture. `%%px` on a blocking
view (`view.block = True`, as a notebook's `%%px` waits). nbdistributed's
`%%distributed` waits on a thread in 100 ms polls, so it cannot return in under
~100 ms.""",
    "throughput": """
Same loop text for every launcher; only the loop is timed, on rank 0, after warm-up steps
and a barrier. OMP_NUM_THREADS=1 in every rank's environment before torch starts
(dist-notebook `--threads 1`; the others inherit it). "one process" is one rank with
batch 64 and no DDP: read the 2-rank rows against it for what data parallelism costs or
gains on 2 cores.""",
    "intro": """
Every comparison runs its sides interleaved (A B C, C B A, ...) so that the machine's load
falls on all of them; numbers are medians, ratios are median over median. Regenerate with
`make bench` (`python -m bench run --all`); each part's raw numbers are in
`bench/results/<part>.json`. On a shared 2-core machine the load of other work shows as
wide min-max spreads: read a difference between medians as real only where the spreads do
not overlap.""",
    "state_transfer": """
On one host a push pickles the dict in the kernel with its tensors and arrays written once
into a shared-memory file (/dev/shm); every rank maps that file copy-on-write and rebuilds
the dict around views of it, so the data is copied once whatever the number of ranks and
a rank's pages become its own only when it writes them. A pull --all goes the same way
back (each rank writes a file, the kernel maps it). Ranks on other hosts get the old path
(to rank 0 through ipyparallel, then a broadcast over the process group). The size is
chosen when the part starts: 1 GiB when 8 GiB plus a 2.5 GiB margin are available, else
the largest power of two that fits (the JSON and the line above say which).""",
}


def note(key: str) -> str:
    return "\n" + " ".join(NOTES[key].split())


def earlier(name: str, started: float | None) -> str:
    """A line for a section whose JSON this run did not write (``--only``), else ""."""
    path = common.RESULTS / f"{name}.json"
    if started is None or not path.exists() or path.stat().st_mtime >= started:
        return ""
    m = json.loads(path.read_text()).get("machine", {})
    return (
        f"*Not part of this run: measured {m.get('date', 'earlier')}, load average "
        f"{m.get('load_average', '?')}.*\n\n"
    )


def build(
    status: dict[str, dict[str, Any]],
    since: float | None,
    total: float | None,
    started: float | None = None,
    measured_on: dict[str, Any] | None = None,
) -> str:
    # The machine of the run (``--table-only``: of the last run, not of this one).
    m = measured_on or common.machine()
    parts: list[str] = ["# Benchmarks: dist-notebook side by side with its peers", ""]
    parts.append(
        f"Machine: {m['cpus']} cores, {m['ram_gib']} GiB RAM, no GPU; Python {m['python']}, "
        f"torch {m['torch']}, ipyparallel {m['ipyparallel']}, accelerate {m['accelerate']}, "
        f"nbdistributed {m['nbdistributed']}, IPython {m['IPython']}; {m['platform']}; "
        f"{m['date']}. Load average "
        f"{'at the end of that run' if measured_on else 'when the table was written'}: "
        f"{m['load_average']}."
    )
    parts.append(note("intro"))
    if total is not None:
        done = ", ".join(f"{k} {v['seconds']:.0f} s" for k, v in status.items())
        parts.append(f"\nThis run took {total / 60:.1f} min: {done}.")
    failed = {k: v["status"] for k, v in status.items() if v["status"] != "ok"}
    if failed:
        listed = "; ".join(f"`{k}` {v}" for k, v in failed.items())
        parts.append(f"\nParts that did not finish: {listed}.")

    def add(title: str, name: str, render: Any, *extra: Any) -> None:
        parts.append(f"\n## {title}\n\n`python -m bench run {name}`\n")
        d = load(name, since)
        if d is None:
            why_not = status.get(name, {}).get("status", "not run")
            parts.append(f"No result in this run ({why_not}).")
            return
        try:
            parts.append(earlier(name, started) + render(d, *extra))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            parts.append(f"The result could not be read ({type(e).__name__}: {e}).")

    dispatch = load("dispatch", since)
    train = load("train_overhead", since)
    add("1. Cold start to the first completed all_reduce (CPU, gloo)", "cold_start", section_cold)
    parts.append(note("cold_start"))
    add("2. Cell round trip: an empty cell", "round_trip", section_round_trip, dispatch)
    parts.append(note("round_trip"))
    add("3. Training throughput, 2 ranks, 1 thread each", "throughput", section_throughput, train)
    parts.append(note("throughput"))
    latency = load("metrics_latency", since)
    add(
        "4. Metrics: report() every step vs publish_data",
        "metrics_overhead",
        section_metrics,
        train,
        latency,
    )
    add("5. State transfer to 4 ranks", "state_transfer", section_state)
    parts.append(note("state_transfer"))
    add("6. Memory per rank after start (2 ranks)", "memory", section_memory)
    add("7. First calls in a fresh kernel (2 ranks)", "first_call", section_first_call)
    add("8. Where the cores go while training (2 ranks)", "cpu_share", section_cpu_share)
    parts.append(f"\n## GPU (one H200, from `bench/results/{GPU_LOG.name}`)\n")
    parts.append(section_gpu())
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench run --all", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: fewer repetitions everywhere"
    )
    parser.add_argument(
        "--only", help="comma-separated parts to run (the table shows the rest as not run)"
    )
    parser.add_argument(
        "--table-only", action="store_true", help="rebuild the table from the JSON files"
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=TOTAL_S / 60,
        help=f"time for the whole set (default {TOTAL_S // 60}); parts past it are ended",
    )
    args = parser.parse_args()
    names = [p.name for p in PARTS]
    unknown = sorted(set(args.only.split(",")) - set(names)) if args.only else []
    if unknown:
        parser.error(f"no part {', '.join(unknown)} in --all: --only takes {','.join(names)}")

    common.RESULTS.mkdir(parents=True, exist_ok=True)
    if args.table_only:
        last = common.RESULTS / "run_all.json"
        run = json.loads(last.read_text()) if last.exists() else {}
        text = build(
            run.get("parts", {}), None, run.get("total_seconds"), measured_on=run.get("machine")
        )
        README.write_text(text)
        print(text)
        return

    env = common.child_env(threads=None)
    if args.quick:
        env["BENCH_QUICK"] = "1"
    wanted = set(args.only.split(",")) if args.only else None
    started = time.time()
    t0 = time.perf_counter()
    status: dict[str, dict[str, Any]] = {}
    chosen = [p for p in PARTS if not wanted or p.name in wanted]
    for i, part in enumerate(chosen):
        part_args = list(part.quick if args.quick else part.args)
        # The time of the parts still to come (those that will run: their peers are here).
        later = sum(p.expected_s for p in chosen[i + 1 :] if not missing(p.peers))
        left = args.minutes * 60 - (time.perf_counter() - t0) - later
        budget = int(max(30, min(part.budget_s, left)))
        lacking = missing(part.peers)
        if lacking:  # named in the table, not run
            status[part.name] = {"status": f"needs {', '.join(lacking)}: {INSTALL_PEERS}"}
            status[part.name]["seconds"] = 0.0
            print(f"=== {part.name}: {status[part.name]['status']}", flush=True)
            continue
        status[part.name] = run_part(part, part_args, budget, env)
    total = time.perf_counter() - t0
    (common.RESULTS / "run_all.json").write_text(
        json.dumps(
            {
                "benchmark": "run_all",
                "quick": args.quick,
                "total_seconds": round(total, 1),
                "parts": status,
                "machine": common.machine(),
            },
            indent=2,
        )
        + "\n"
    )
    # With --only, the other parts' earlier results still count; otherwise only this run's.
    text = build(status, None if wanted else started - 1, total, started - 1)
    README.write_text(text)
    print("\n" + text)
    print(f"total {total / 60:.1f} min; table in {README}")


if __name__ == "__main__":
    main()
