"""The sbatch file beside an exported script: srun starts one torchrun per node.

The Slurm launcher's settings (cluster/launchers.py): the job's name, ``--export=ALL``,
the nodes and GPUs per node (``slurm_namespace``), partition, time limit and account;
torchrun then starts the ranks of each node. One node: ``torchrun --standalone`` (it
picks its own free port). More: a c10d rendezvous on the job's first node, on a port
chosen free there when the job starts (the batch script runs on that node), never a
fixed one. The job uses the notebook's Python (its ``-m torch.distributed.run``) and its
run store, so the run shows beside the notebook's (the store must then be on a file system
every node sees, as the job's working folder).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from .. import envvars
from ..cluster.launchers import slurm_namespace
from .script import ExportError

# What an #SBATCH value may hold: sbatch reads those lines itself, without a shell.
_SAFE = re.compile(r"[A-Za-z0-9_.,:@+=/-]+")


@dataclass(frozen=True)
class Batch:
    name: str  # the run's name: the job is dist-notebook-NAME
    script: str  # the exported script, absolute
    workdir: str
    python: str
    store: str
    nodes: int = 1
    procs_per_node: int = 1
    gpus_per_node: int = 0
    partition: str = ""
    time_limit: str = ""
    account: str = ""

    def __post_init__(self) -> None:
        for flag, value in (
            ("--partition", self.partition),
            ("--time", self.time_limit),
            ("--account", self.account),
        ):
            if value and not _SAFE.fullmatch(value):
                raise ExportError(
                    f"{flag} {value!r} has characters sbatch would misread: letters, digits"
                    " and _.,:@+=/- only"
                )


def job_name(name: str) -> str:
    return "dist-notebook-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "run")


def compose(batch: Batch) -> str:
    layout = slurm_namespace(batch.nodes, batch.nodes, batch.gpus_per_node)
    lines = [
        "#!/bin/bash",
        f"# {job_name(batch.name)}: written by %dist_export; submit with: sbatch <this file>",
        f"#SBATCH --job-name={job_name(batch.name)}",
        "#SBATCH --export=ALL",
        f"#SBATCH --nodes={layout['nodes']}",
        layout["tasks_line"],  # one task per node: its torchrun starts the node's ranks
        layout["gpu_line"],
    ]
    for flag, value in (
        ("partition", batch.partition),
        ("time", batch.time_limit),
        ("account", batch.account),
    ):
        if value:
            lines.append(f"#SBATCH --{flag}={value}")
    q = shlex.quote
    lines += [
        f"#SBATCH --chdir={_sbatch_path(batch.workdir)}",
        f"#SBATCH --output={job_name(batch.name)}-%j.out",
        "set -eu",
        "# The notebook's run store: the run shows in %dist_runs and the side panel.",
        f"export {envvars.STORE}={q(batch.store)}",
    ]
    torchrun = f"{q(batch.python)} -m torch.distributed.run"
    procs = f"--nproc-per-node={batch.procs_per_node}"
    if batch.nodes == 1:
        lines.append(f"srun --kill-on-bad-exit=1 {torchrun} --standalone {procs} {q(batch.script)}")
    else:
        lines += [
            'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "# A port free on the first node now (this script runs there), never a fixed one.",
            f"port=$({q(batch.python)} -c 'import socket; s = socket.socket();"
            ' s.bind(("", 0)); print(s.getsockname()[1])\')',
            f"srun --kill-on-bad-exit=1 {torchrun} --nnodes={batch.nodes} {procs}"
            ' --rdzv-backend=c10d --rdzv-id="$SLURM_JOB_ID" --rdzv-endpoint="$head:$port"'
            f" {q(batch.script)}",
        ]
    return "\n".join(line for line in lines if line) + "\n"


def _sbatch_path(path: str) -> str:
    if not re.fullmatch(r"[^\s'\"\\$`]+", path):
        raise ExportError(
            f"the folder {path!r} has spaces or quotes, which #SBATCH --chdir cannot take:"
            " export into a folder without them"
        )
    return path
