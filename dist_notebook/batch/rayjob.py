"""The Ray Jobs submission beside an exported script: ``ray job submit`` runs its torchrun.

A Ray job's entrypoint is one shell command on one node of the Ray cluster (the head,
or a node with the CPUs or GPUs it reserves): here ``torchrun --standalone
--nproc-per-node P SCRIPT``, all the job's ranks on that node. Beside the script the
submission needs its runtime env, ``NAME.rayjob.yaml`` (JSON, which YAML reads): the
script's folder is the job's working folder, of which Ray uploads the script and its
pushed values only (``excludes``: every other name), and the run store
(``DIST_NOTEBOOK_STORE``), so the run shows beside the notebook's where the job's node
sees that path. The printed command names the job server (the Ray dashboard's
address, ``http://HEAD:8265``; by default that of the Ray cluster the kernel is
connected to), the folder, that file and what the entrypoint reserves (a CPU or a GPU a
rank). The job runs the Ray node's ``torchrun`` (torch and dist-notebook installed there,
as ``--launcher ray`` needs), not the notebook's Python.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import envvars
from .script import ExportError

# How long the connected Ray cluster's job server may take to say where it is.
LOOKUP_TIMEOUT_S = 10.0
# What a file name may hold to be named in Ray's excludes (gitignore patterns) as it is.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
_ADDRESS = re.compile(r"(https?://)?[A-Za-z0-9_.:\[\]-]+(:\d+)?/?")


@dataclass(frozen=True)
class RayJob:
    script: Path  # the exported script, absolute
    values: Path | None  # its pushed values, beside it
    address: str  # the job server: http://HEAD:8265
    store: str
    nproc: int
    gpus: int = 0  # GPUs the entrypoint reserves (one a rank), else a CPU a rank

    @property
    def env_file(self) -> Path:
        return self.script.with_name(self.script.stem + ".rayjob.yaml")

    def runtime_env(self) -> str:
        """The runtime env's text (see the module)."""
        keep = [self.script.name] + ([self.values.name] if self.values else [])
        env = {
            # Every name of the folder but the script and its values: '[!.]*' and '.?*'
            # are every name, the folder itself ('.') not; '!/NAME' takes one back.
            "excludes": ["[!.]*", ".?*", *(f"!/{name}" for name in keep)],
            "env_vars": {envvars.STORE: self.store},
        }
        return json.dumps(env, indent=2) + "\n"

    def command(self) -> str:
        """The ``ray job submit`` line that runs the job."""
        q = shlex.quote
        reserve = (
            f"--entrypoint-num-gpus {self.gpus}"
            if self.gpus
            else f"--entrypoint-num-cpus {self.nproc}"
        )
        return (
            f"ray job submit --address {q(self.address)}"
            f" --working-dir {q(str(self.script.parent))}"
            f" --runtime-env {q(str(self.env_file))} {reserve}"
            f" -- torchrun --standalone --nproc-per-node {self.nproc} {q(self.script.name)}"
        )


def check_name(script: Path, values: Path | None) -> None:
    """ExportError unless the files' names can go into Ray's excludes as they are."""
    for path in (script, values):
        if path is not None and not _PLAIN_NAME.fullmatch(path.name):
            raise ExportError(
                f"--ray-job: the name {path.name!r} has characters Ray's excludes read as"
                " patterns: name the script with letters, digits and _.+- only"
            )


def job_address(given: str | None) -> str:
    """The job server: *given*, else that of the Ray cluster this kernel is connected to
    (ExportError naming --address when there is none, or it does not answer)."""
    if given:
        if not _ADDRESS.fullmatch(given):
            raise ExportError(
                f"--address {given!r} is not a Ray job server's address: give one as"
                " http://HEAD:8265 (the Ray dashboard's)"
            )
        return given.rstrip("/")
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        raise ExportError(
            "--ray-job needs the Ray cluster's job server: add --address http://HEAD:8265"
            " (its dashboard's), or export from a kernel whose cluster runs on Ray"
            " (--launcher ray)"
        )
    box: dict[str, str | BaseException] = {}

    def lookup() -> None:
        try:
            from ray.job_submission import JobSubmissionClient

            box["address"] = JobSubmissionClient().get_address()
        except Exception as e:  # told below, with the fix
            box["error"] = e

    # A thread: Ray's client asks the server without a bound of its own.
    worker = threading.Thread(target=lookup, name="dist-notebook-ray-job-server", daemon=True)
    worker.start()
    worker.join(LOOKUP_TIMEOUT_S)
    address = box.get("address")
    if isinstance(address, str):
        return address
    error = box.get("error")
    why = (
        f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
        if error is not None
        else f"no answer within {LOOKUP_TIMEOUT_S:g} s"
    )
    raise ExportError(
        f"the Ray cluster's job server could not be found ({why}): add --address"
        " http://HEAD:8265 (the Ray dashboard's; `ray status` names the head)"
    )


def summary(job: RayJob) -> list[str]:
    """What the magic prints for the job: the file written and the command."""
    try:  # as the user would type it: relative when under the working folder
        shown = str(job.env_file.relative_to(Path.cwd()))
    except ValueError:
        shown = str(job.env_file)
    sent = ", ".join([job.script.name] + ([job.values.name] if job.values else []))
    reserved = f"{job.gpus} GPU(s)" if job.gpus else f"{job.nproc} CPU(s)"
    return [
        f"wrote {shown} (the Ray job's runtime env: uploads {sent}, records the run in"
        f" the run store); submit it ({job.nproc} rank(s) on one Ray node, {reserved}):",
        f"  {job.command()}",
    ]


@dataclass(frozen=True)
class Wanted:
    """What ``%dist_export --ray-job`` asks, checked before any file is written."""

    target: Path
    address: str
    nproc: int
    gpus: int
    force: bool = False


def wanted(
    path: str,
    engines: Any,
    address: str | None,
    nodes: int | None,
    gpus_per_node: int | None,
    procs_per_node: int | None,
    force: bool,
) -> Wanted:
    """The job's shape from the notebook's *engines* and the flags (ExportError naming
    the fix). One node: a Ray job's entrypoint is one command on one node."""
    if nodes is not None and nodes > 1:
        raise ExportError(
            f"--ray-job runs its ranks on one Ray node (its entrypoint's), not {nodes}:"
            " drop --nodes, or keep ranks on several Ray nodes in the notebook"
            " (%dist_cluster start --launcher ray)"
        )
    target = Path(os.path.abspath(os.path.expanduser(path)))
    check_name(target, target.with_name(target.stem + ".values.pkl"))
    env_file = target.with_name(target.stem + ".rayjob.yaml")
    if env_file.exists() and not force:
        raise ExportError(f"{env_file} exists: pass --force to overwrite it, or name another file")
    on_gpus = any(str(d).startswith("cuda") for d in engines.devices)
    ranks = len(engines.pids) or int(getattr(engines.spec, "n", 1) or 1)
    gpus = gpus_per_node if gpus_per_node is not None else (ranks if on_gpus else 0)
    if engines.backend == "nccl" and not gpus:
        raise ExportError("the notebook's ranks use nccl (GPUs): give --gpus-per-node G")
    return Wanted(target, job_address(address), procs_per_node or gpus or ranks, gpus, force)


def write(want: Wanted, store: str, values: Path | None) -> RayJob:
    """Write the job's runtime env beside the exported script (whole or not at all)."""
    job = RayJob(want.target, values, want.address, store, want.nproc, want.gpus)
    fd, tmp = tempfile.mkstemp(prefix=f".{job.env_file.name}.", dir=job.env_file.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(job.runtime_env())
        os.replace(tmp, job.env_file)  # owner-only, as mkstemp made it: it names the store
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return job
