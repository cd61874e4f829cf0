"""``%dist_export``'s work: from the kernel's history to the files of a batch job.

``export()`` checks everything first (the cells are plain Python, the pushed values the
cells use can be saved, the files may be written) and writes only then: a refusal
leaves no file behind. Each file is written to a private temporary file in the target
folder and renamed over the target, so a failed write never leaves half a script.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cluster.engines.base import BatchDefaults
from . import sbatch as sbatch_file
from . import script as script_file
from .script import ExportError, Part, Plan

if TYPE_CHECKING:
    from ..cluster.spec import ClusterSpec


@dataclass(frozen=True)
class Options:
    path: str
    name: str | None = None
    force: bool = False
    sbatch: bool = False
    nodes: int | None = None
    gpus_per_node: int | None = None
    procs_per_node: int | None = None
    partition: str | None = None
    time_limit: str | None = None
    account: str | None = None


@dataclass
class Exported:
    script: Path
    sbatch: Path | None
    values: Path | None
    plan: Plan
    run_name: str
    nproc: int
    notes: list[str] = field(default_factory=list)
    batch: sbatch_file.Batch | None = None
    pushed: tuple[str, ...] = ()  # the pushed values written (the cells use them)


def export(entries: list[Any], train: Any, options: Options, store: str) -> Exported:
    """Write the script (and the sbatch file) for the history *entries* whose last
    training is *train* (None: ExportError)."""
    target = _target(options)
    if train is None:
        raise ExportError(
            "no %%dist_train cell ran in this kernel: run the training cell, then"
            " %dist_export again"
        )
    plan = script_file.select(entries, train)
    code_parts = [p for p in [*plan.before, plan.train, *plan.after] if p.kind != "push"]
    for part in code_parts:
        script_file.check_python(part)
    used = script_file.names_used(code_parts)
    pushes = {e.code: e for e in entries if e.kind == "push"}
    wanted = [p.name for p in [*plan.before, *plan.after] if p.kind == "push"]
    # Read only here, each value the script needs (a kept one is loaded from its file).
    literals, pickled = _values({n: pushes[n].values[n] for n in wanted if n in used})
    spec, engines = train.train_spec, train.engines
    cluster = engines.spec
    name = options.name or spec.name or target.stem
    values_path = target.with_name(target.stem + ".values.pkl") if pickled else None
    batch = _batch(options, cluster, engines, name, target, store) if options.sbatch else None
    sbatch_path = target.with_suffix(".sbatch") if batch is not None else None
    for path in (target, sbatch_path, values_path):
        if path is not None and path.exists() and not options.force:
            raise ExportError(f"{path} exists: pass --force to overwrite it, or name another file")
    run = train.run
    state = getattr(getattr(run, "state", None), "value", "unknown")
    nproc = len(engines.pids) or getattr(cluster, "n", 1)
    text = script_file.compose(
        plan,
        script_file.Script(
            name=name,
            file_name=target.name,
            backend=engines.backend or "gloo",
            timeout_s=float(getattr(cluster, "timeout", 30.0)),
            gpus=any(d.startswith("cuda") for d in engines.devices),
            threads=getattr(cluster, "threads", None),
            run_options=_run_options(spec),
            literals=literals,
            pickled=tuple(pickled),
            values_file=values_path.name if values_path else None,
            origin=(
                f"the notebook's run {getattr(run, 'name', '?')} ({getattr(run, 'id', '?')},"
                f" {state}) on cluster {engines.cluster_id}: {nproc} ranks, {engines.backend}"
            ),
            when=time.strftime("%Y-%m-%d %H:%M"),
            nproc=nproc,
        ),
    )
    _check_compiles(text, target)
    notes = list(plan.left_out) + _other_kernels(plan)
    if spec.timeout:
        notes.append(
            f"the training's --timeout {spec.timeout:g} is not in the script: bound the job"
            " with sbatch --time (--time here) instead"
        )
    if state not in ("succeeded", "unknown"):
        notes.append(f"the notebook's run {getattr(run, 'name', '')} is {state}")
    job_text = sbatch_file.compose(batch) if batch is not None else None  # may refuse
    if values_path is not None:
        import cloudpickle

        _write(values_path, cloudpickle.dumps(pickled), private=True)
    _write(target, text.encode())
    if job_text is not None and sbatch_path is not None:
        _write(sbatch_path, job_text.encode())
    written = (*literals, *pickled)
    return Exported(target, sbatch_path, values_path, plan, name, nproc, notes, batch, written)


def _other_kernels(plan: Plan) -> list[str]:
    """Which cells of the script an earlier kernel ran (their In [N] are that kernel's)."""
    parts = [*plan.before, plan.train, *plan.after]
    notes = []
    for pid in sorted({p.kernel for p in parts if p.kernel is not None}):
        mine = [replace(p, kernel=None) for p in parts if p.kernel == pid]
        cells = ", ".join(f"{p.label} {p.name}".rstrip() for p in mine)
        notes.append(f"{cells} ran in kernel pid {pid}, before this kernel attached")
    return notes


def _check_compiles(text: str, target: Path) -> None:
    """ExportError, before any file is written, unless the script compiles as it is."""
    try:
        compile(text, str(target), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        where = f"line {e.lineno}: " if isinstance(e, SyntaxError) and e.lineno else ""
        message = e.msg if isinstance(e, SyntaxError) else str(e)
        raise ExportError(
            f"the script would not compile ({where}{message}), so {target.name} was not"
            " written: make the cells it names plain Python that runs outside a notebook,"
            " run them again, then export"
        ) from None


def _target(options: Options) -> Path:
    if not options.path:
        raise ExportError("name the script to write, e.g. %dist_export train.py")
    target = Path(os.path.abspath(os.path.expanduser(options.path)))
    if target.suffix != ".py":
        raise ExportError(f"the script's name must end in .py (got {options.path!r})")
    if not target.parent.is_dir():
        raise ExportError(f"no folder {target.parent}: create it first, or name another path")
    if target.is_dir():
        raise ExportError(f"{target} is a folder: name the script file, e.g. {target}/train.py")
    shaping = (
        options.nodes,
        options.gpus_per_node,
        options.procs_per_node,
        options.partition,
        options.time_limit,
        options.account,
    )
    if not options.sbatch and any(v is not None for v in shaping):
        raise ExportError(
            "--nodes, --gpus-per-node, --procs-per-node, --partition, --time and --account"
            " shape the sbatch file: add --sbatch"
        )
    return target


def _values(values: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """The pushed values as literals, or else pickled (ExportError when neither works)."""
    import cloudpickle

    literals: dict[str, str] = {}
    pickled: dict[str, Any] = {}
    for name, value in values.items():
        text = script_file.literal(value)
        if text is not None:
            literals[name] = text
            continue
        try:
            cloudpickle.dumps(value)
        except Exception as e:
            raise ExportError(
                f"the pushed value {name!r} cannot be saved with the script"
                f" ({type(e).__name__}: {e}): make it on the ranks in a %%dist cell instead"
                " of pushing it, run that cell, then export again"
            ) from None
        pickled[name] = value
    return literals, pickled


def _run_options(spec: Any) -> dict[str, Any]:
    return {
        "steps": spec.steps,
        "checkpoint_every": spec.checkpoint_every,
        "checkpoint_dir": spec.checkpoint_dir,
        "resume": spec.resume,
        "tensorboard": spec.tensorboard,
        "mlflow": spec.mlflow,
    }


def _batch(
    options: Options,
    cluster: ClusterSpec | None,
    engines: Any,
    name: str,
    target: Path,
    store: str,
) -> sbatch_file.Batch:
    given = cluster.engines.batch_defaults(cluster) if cluster else BatchDefaults()
    nodes = options.nodes or given.nodes or 1
    gpus = options.gpus_per_node if options.gpus_per_node is not None else given.gpus_per_node
    if engines.backend == "nccl" and not gpus:
        raise ExportError("the notebook's ranks use nccl (GPUs): give --gpus-per-node G")
    n = len(engines.pids) or 1
    procs = options.procs_per_node or gpus or max(1, n // nodes)
    return sbatch_file.Batch(
        name=name,
        script=str(target),
        workdir=str(target.parent),
        python=sys.executable,
        store=store,
        nodes=nodes,
        procs_per_node=procs,
        gpus_per_node=gpus or 0,
        partition=options.partition or given.partition,
        time_limit=options.time_limit or given.time_limit,
        account=options.account or given.account,
    )


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Write *path* whole or not at all: a private temporary file in its folder, renamed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if not private:
            umask = os.umask(0o022)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _shown(path: Path) -> str:
    """*path* as the user would type it: relative when under the working folder."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def summary(done: Exported) -> list[str]:
    """What the magic prints: the files, how to run them, and the notes."""
    p = done.plan
    dist = [x for x in [*p.before, *p.after] if x.kind == "dist"]
    cells = ", ".join(f"[{x.count}]" for x in dist if x.count is not None)
    names = ", ".join(done.pushed)
    what = f"{len(dist)} %%dist cell{'' if len(dist) == 1 else 's'}"
    if cells:
        what += f" (In {cells})"
    if done.pushed:
        what += f", {len(done.pushed)} pushed value{'' if len(done.pushed) == 1 else 's'}"
        what += f" ({names})"
    lines = [
        f"wrote {_shown(done.script)}: {what}, then {p.train.label} as run {done.run_name}",
        f"run it: torchrun --standalone --nproc-per-node {done.nproc} {done.script.name}",
    ]
    if done.sbatch is not None and done.batch is not None:
        b = done.batch
        shape = f"{b.nodes} node(s) x {b.procs_per_node} rank(s)"
        if b.gpus_per_node:
            shape += f", {b.gpus_per_node} GPU(s) per node"
        lines.append(f"wrote {_shown(done.sbatch)} ({shape}): sbatch {done.sbatch.name}")
    if done.values is not None:
        lines.append(
            f"wrote {_shown(done.values)}: pushed values the script loads (keep it beside it)"
        )
    lines += [f"note: {n}" for n in done.notes]
    return lines


__all__ = ["ExportError", "Exported", "Options", "Part", "export", "summary"]
