"""``python -m bench``: list the benchmarks, run one, or run the set behind the docs' tables.

    python -m bench list [--json]
    python -m bench run [--quick] [--results DIR] NAME [ARGS...]
    python -m bench run [--quick] [--results DIR] --all [--only A,B] [--table-only] [--minutes M]

``run NAME`` runs the benchmark's module as ``__main__`` in this process with the arguments
the registry gives it (those behind the docs' figures) followed by ARGS, which override
them. ``--quick`` adds the registry's smoke-run arguments and ``BENCH_QUICK=1``, and writes
into a fresh scratch folder (printed) unless ``--results`` names one: a smoke run never
overwrites a figure the docs cite.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.registry import BENCHMARKS, INSTALL_PEERS, SUPPORT, Bench, by_name, missing

HERE = Path(__file__).resolve().parent
USAGE = (
    "usage: python -m bench list [--json] | "
    "python -m bench run [--quick] [--results DIR] (NAME [ARGS...] | --all [OPTIONS])"
)


def fail(message: str) -> int:
    print(f"bench: {message}", file=sys.stderr)
    return 2


def listing(as_json: bool) -> int:
    if as_json:
        rows = [
            {
                "name": b.name,
                "target": b.target,
                "measures": b.measures,
                "peer": b.peer,
                "command": command(b),
                "in_all": b.in_all,
                "needs": b.needs,
                "peers": list(b.peers),
                "results": list(b.results),
                "docs": list(b.docs),
            }
            for b in BENCHMARKS
        ]
        print(json.dumps({"benchmarks": rows, "support": SUPPORT}, indent=1))
        return 0
    width = max(len(b.name) for b in BENCHMARKS)
    for b in BENCHMARKS:
        tags = ", ".join(x for x in ("in --all" if b.in_all else "", b.needs) if x)
        print(f"{b.name:<{width}}  {b.measures}; against {b.peer}" + (f" [{tags}]" if tags else ""))
    print(f"\n{len(BENCHMARKS)} benchmarks; `python -m bench run NAME` runs one.")
    return 0


def command(b: Bench) -> str:
    return " ".join(["python -m bench run", b.name, *b.args])


def run(argv: list[str]) -> int:
    quick, results, everything = False, "", False
    while argv and argv[0].startswith("--"):
        flag = argv.pop(0)
        if flag == "--quick":
            quick = True
        elif flag == "--all":
            everything = True
            break
        elif flag == "--results":
            if not argv:
                return fail("--results needs a folder: --results DIR")
            results = argv.pop(0)
        else:
            return fail(f"unknown option {flag} before the benchmark's name: {USAGE}")
    if "--quick" in argv:  # also taken after the name
        argv.remove("--quick")
        quick = True
    if not everything and not argv:
        return fail(f"name a benchmark or --all: {USAGE} (`python -m bench list` names them)")
    if quick:
        os.environ["BENCH_QUICK"] = "1"
        results = results or tempfile.mkdtemp(prefix="bench-quick-")
    if results:
        os.environ["BENCH_RESULTS"] = str(Path(results).resolve())
        Path(results).mkdir(parents=True, exist_ok=True)
        print(f"results go to {os.environ['BENCH_RESULTS']}", flush=True)
    if everything:
        return main_of("run_all", ["python -m bench run --all", *argv, *(["--quick"] * quick)])
    name, rest = argv[0], argv[1:]
    b = by_name(name)
    if b is None:
        return fail(f"no benchmark named {name!r}: `python -m bench list` names them")
    lacking = missing(b.peers)
    if lacking:
        return fail(f"{b.name} compares with {', '.join(lacking)}, not installed: {INSTALL_PEERS}")
    args = [*b.args, *(b.quick if quick else ()), *rest]
    if b.needs:
        print(f"{b.name} needs {b.needs}", flush=True)
    if b.script:
        # The script's python is this one (the GPU machine's scripts default to python3).
        env = {**os.environ, "PYTHON": sys.executable}
        return subprocess.call(["bash", str(HERE / b.script), *args], env=env)
    return main_of(b.module or b.name, [f"python -m bench run {b.name}", *args])


def main_of(module: str, argv: list[str]) -> int:
    """Run ``bench.<module>`` as ``__main__`` with *argv*; its exit status."""
    sys.argv = argv
    try:
        runpy.run_module(f"bench.{module}", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    verb, rest = argv[0], argv[1:]
    if verb == "list":
        return listing("--json" in rest)
    if verb == "run":
        return run(rest)
    return fail(f"unknown command {verb!r}: {USAGE}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
