"""Run every teaching notebook once, in order, and time it: the learner's path on this machine.

    python -m bench run gpu_notebooks                    # all of notebooks/*.ipynb
    python -m bench run gpu_notebooks --only 01,05       # some of them
    python -m bench run gpu_notebooks --cpu              # hide the GPUs: 2 CPU ranks (gloo)
    python -m bench run gpu_notebooks --start-args "-n 1"   # e.g. a 1-rank cluster on CPU

Each notebook runs top to bottom on a fresh kernel of this interpreter, with nbclient, as
``testbed/notebook_runner.py`` runs it, but only the learner's path: every cell once, each
exercise with its solution and then its check (the test also runs every stub and wrong
answer). The notebooks start their own cluster with ``%dist_cluster start``: one rank per
visible GPU, else 2 CPU ranks, so on a machine with one GPU each notebook gets 1 NCCL rank
on ``cuda:0`` (two ranks cannot share a GPU with NCCL). ``--cpu`` gives the 2 CPU ranks the
notebook test uses there instead; ``--start-args`` adds flags to every plain
``%dist_cluster start`` line (only in the executed copy).

A notebook gets ``--timeout`` seconds in all (each cell is given what is left); past that, or
at its first failing cell, it stops and the next one starts. Prints a table (notebook, wall
seconds, cells run, status, the cluster's ranks read from the rank table it printed) and
writes ``bench/results/notebooks_<machine>.json`` (``--machine``, default ``h200`` style from
the GPU's name, else ``cpu``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench import common
from testbed.notebook_runner import ExerciseRunner, NotebookFailure

NOTEBOOKS = common.ROOT / "notebooks"
START = "%dist_cluster start"
# A row of the rank table %dist_cluster start prints: "... <device> <backend> <state>".
RANK_ROW = re.compile(r"^\s*(\d+)\s.*?\s(cuda:\d+|cpu)\s+(nccl|gloo)\s")


class LearnerRunner(ExerciseRunner):
    """The test's runner, on the learner's path: each exercise's solution, then its check."""

    def __init__(self, path: Path, spec_dir: Path, env: dict[str, str], budget_s: float) -> None:
        super().__init__(path, spec_dir, env)
        self.deadline = time.perf_counter() + budget_s
        self.cells_run = 0

    def _run(self, cell: Any, index: int, what: str) -> None:
        left = self.deadline - time.perf_counter()
        if left <= 0:
            raise NotebookFailure(f"{self.path.name}: out of time before {what}")
        self.client.timeout = max(1, int(left))
        self.cells_run += 1
        super()._run(cell, index, what)

    def _exercise(self, ex: Any) -> None:
        import nbformat

        assert ex.answers.solution is not None
        # Each cell stands in the notebook where it runs before it runs: nbclient updates a
        # display (a live view) in the cell at the index it recorded for it, and the stub
        # there has no outputs to update (IndexError in nbclient's _update_display_id).
        solution = nbformat.v4.new_code_cell(ex.answers.solution)
        self.nb.cells[ex.exercise_index] = solution
        self._run(solution, ex.exercise_index, f"exercise {ex.id!r}: the solution")
        check = nbformat.v4.new_code_cell(self.sources[ex.check_index])
        self.nb.cells[ex.check_index] = check
        self._run(check, ex.check_index, f"exercise {ex.id!r}: the check on the solution")
        self.report.exercises.append(ex.id)


def with_start_args(runner: ExerciseRunner, extra: str) -> int:
    """Append *extra* to every plain ``%dist_cluster start`` line; return how many."""
    changed = 0
    for cell in runner.nb.cells:
        if cell.cell_type != "code":
            continue
        lines = cell.source.split("\n")
        for i, line in enumerate(lines):
            if line.strip() == START:
                lines[i] = f"{line.rstrip()} {extra}"
                changed += 1
        cell.source = "\n".join(lines)
    return changed


def _texts(cell: Any) -> list[str]:
    out = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            out.append(output.get("text", ""))
        elif "data" in output:
            out.append(output["data"].get("text/plain", ""))
    return out


def ranks_of(nb: Any) -> str:
    """The first rank table the notebook printed, as '2 x cpu gloo' or '1 x cuda:0 nccl'."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        rows = []
        for text in _texts(cell):
            for line in text.splitlines():
                m = RANK_ROW.match(line)
                if m:
                    rows.append((int(m.group(1)), m.group(2), m.group(3)))
        if rows:
            seen = {rank: (device, backend) for rank, device, backend in rows}
            kinds: dict[tuple[str, str], int] = {}
            for device, backend in seen.values():
                kinds[(device, backend)] = kinds.get((device, backend), 0) + 1
            return ", ".join(f"{n} x {d} {b}" for (d, b), n in kinds.items())
    return "-"


def first_line(error: BaseException, name: str) -> str:
    """The error's first line, without the notebook's name that NotebookFailure starts with."""
    text = str(error) if isinstance(error, NotebookFailure) else f"{type(error).__name__}: {error}"
    text = text.strip().removeprefix(f"{name}: ")
    return text.splitlines()[0][:200] if text else type(error).__name__


def run_one(
    path: Path, env: dict[str, str], budget_s: float, extra: str, keep: Path | None
) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="dist-nb-bench-"))
    env = dict(env, DIST_NOTEBOOK_STORE=str(tmp / "runs.sqlite"))
    runner = LearnerRunner(path, tmp / "kernels", env, budget_s)
    if extra:
        with_start_args(runner, extra)
    code_cells = sum(1 for c in runner.nb.cells if c.cell_type == "code")
    status = "ok"
    started = time.perf_counter()
    try:
        runner.run()
    except Exception as e:  # a failing cell, a cell timeout, a kernel that died: go on
        status = first_line(e, path.name)
        if not isinstance(e, NotebookFailure):
            traceback.print_exc()
    wall = time.perf_counter() - started
    if keep is not None:
        import nbformat

        keep.mkdir(parents=True, exist_ok=True)
        nbformat.write(runner.nb, keep / path.name)
    shutil.rmtree(tmp, ignore_errors=True)
    slow = sorted(runner.report.cell_s.items(), key=lambda kv: -kv[1])[:3]
    return {
        "notebook": path.name,
        "wall_s": round(wall, 1),
        "cells_run": runner.cells_run,
        "code_cells": code_cells,
        "status": status,
        "ranks": ranks_of(runner.nb),
        "exercises": runner.report.exercises,
        "slowest_cells": [[i, round(s, 1)] for i, s in slow],
    }


def gpu_names() -> list[str]:
    from dist_notebook.cluster.devices import query_gpus

    return query_gpus("name")


def machine_label(gpus: list[str]) -> str:
    """'h200' for 'NVIDIA H200', else 'cpu'."""
    if not gpus:
        return "cpu"
    words = [w for w in gpus[0].lower().replace("nvidia", "").split() if w.isalnum()]
    return words[0] if words else "gpu"


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", help="notebook numbers or name parts, comma-separated (e.g. 01,05)")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per notebook (240)")
    p.add_argument("--total", type=float, default=3600.0, help="seconds for all (3600)")
    p.add_argument("--cpu", action="store_true", help="hide the GPUs: 2 CPU ranks with gloo")
    p.add_argument("--start-args", default="", help="flags added to each '%%dist_cluster start'")
    p.add_argument("--machine", help="name in the result file (default: from the GPU, or cpu)")
    p.add_argument("--keep", type=Path, help="write the executed notebooks into this folder")
    args = p.parse_args()

    paths = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        paths = [q for q in paths if any(q.name.startswith(w) or w in q.stem for w in wanted)]
        if not paths:
            sys.exit(f"--only {args.only}: no notebook matches; they are {NOTEBOOKS}/NN_*.ipynb")
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # ipykernel's inline backend draws the plots, as in Jupyter
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(common.ROOT), env.get("PYTHONPATH")) if x)
    if args.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    gpus = gpu_names()
    label = args.machine or machine_label(gpus) + ("_cpu" if args.cpu and gpus else "")
    if args.cpu and gpus:
        mode = "GPUs hidden: CPU ranks"
    else:
        mode = "one rank per GPU" if gpus else "no GPU: CPU ranks"
    if args.start_args:
        mode += f", '{START} {args.start_args}'"
    print(
        f"{len(paths)} notebooks on {label}: {mode}; GPUs: {', '.join(gpus) or 'none'}", flush=True
    )

    results: list[dict[str, Any]] = []
    total = time.perf_counter()

    def save() -> None:  # after every notebook: a run stopped from outside keeps what it did
        common.write_result(
            f"notebooks_{label}",
            {
                "mode": mode,
                "start_args": args.start_args,
                "timeout_s": args.timeout,
                "total_budget_s": args.total,
                "gpus": gpus,
                "total_s": round(time.perf_counter() - total, 1),
                "notebooks": results,
            },
        )

    for path in paths:
        left = args.total - (time.perf_counter() - total)
        if left < 10:
            r = {
                "notebook": path.name,
                "wall_s": 0.0,
                "cells_run": 0,
                "code_cells": 0,
                "status": f"not run: --total {args.total:.0f} s spent",
                "ranks": "-",
            }
        else:
            r = run_one(path, env, min(args.timeout, left), args.start_args, args.keep)
        results.append(r)
        print(f"{r['notebook']}: {r['wall_s']} s, {r['ranks']}, {r['status']}", flush=True)
        save()
    total_s = time.perf_counter() - total

    head = ["notebook", "wall s", "cells", "ranks", "status"]
    rows = [
        [
            r["notebook"],
            f"{r['wall_s']:.1f}",
            f"{r['cells_run']}/{r['code_cells']}",
            r["ranks"],
            r["status"],
        ]
        for r in results
    ]
    print()
    print(common.md_table(head, rows))
    ok = sum(r["status"] == "ok" for r in results)
    print(f"\n{ok}/{len(results)} ok, {total_s:.0f} s in all")


if __name__ == "__main__":
    main()
