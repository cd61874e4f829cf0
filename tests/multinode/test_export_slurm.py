"""%dist_export --sbatch on the Slurm test hosts: the notebook trains on the local 2-rank
gloo cluster; the sbatch file, submitted as it is written (2 nodes, one rank each: srun
starts a torchrun per node, a c10d rendezvous on the first node's free port), trains to
the same final loss, and its run is in the notebook's run store."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from testbed.slurm import jobs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

DATA = """%%dist
import torch
from sklearn.datasets import load_digits
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
Xr, yr = X[rank::world_size], y[rank::world_size]
"""
TRAIN = """%%dist_train --name export-slurm --steps 20 --no-dashboard
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.2)
gen = torch.Generator().manual_seed(1000 + rank)
for step in range(20):
    idx = torch.randint(0, len(Xr), (64,), generator=gen)
    loss = nn.functional.cross_entropy(model(Xr[idx]), yr[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
    report(step=step, loss=loss, samples=64)
"""


def _final(reader: Any, run_id: str) -> dict[int, float]:
    last: dict[int, Any] = {}
    for rec in reader.records(run_id):
        if rec.rank not in last or rec.step >= last[rec.rank].step:
            last[rec.rank] = rec
    return {rank: rec.metrics["loss"] for rank, rec in last.items()}


def test_sbatch_file_runs_on_two_nodes_to_the_notebooks_loss(
    shell: Any, cluster2: Any, slurm_hosts: Any, tmp_path: Path, throwaway_store: str
) -> None:
    from dist_notebook.magics.history import history_of
    from dist_notebook.store import StoreReader

    history_of(shell).entries.clear()
    for text in (DATA, TRAIN):
        result = shell.run_cell(text, store_history=True)
        assert result.success, result.error_in_exec
    notebook_run = shell.magics_manager.registry["TrainMagics"].last_result
    target = tmp_path / "slurm_job.py"
    shell.run_line_magic(
        "dist_export",
        f"{target} --sbatch --nodes 2 --procs-per-node 1 --partition test --time 10",
    )
    conf = slurm_hosts.slurm_conf
    env = dict(os.environ, SLURM_CONF=str(conf))
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            ["sbatch", "--wait", str(target.with_suffix(".sbatch"))],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        for job in jobs(conf):
            subprocess.run(["scancel", job], env=env, timeout=30, check=False)
    took = time.perf_counter() - t0
    logs = "".join(p.read_text() for p in tmp_path.glob("dist-notebook-export-slurm-*.out"))
    assert done.returncode == 0, done.stdout + done.stderr + logs[-4000:]
    reader = StoreReader(Path(throwaway_store))
    try:
        runs = [
            r
            for r in reader.runs()
            if r["cluster_id"].startswith("batch-slurm") and r["name"] == "export-slurm"
        ]
        assert len(runs) == 1, (runs, logs[-3000:])
        stored = reader.run(runs[0]["id"])
        hosts = {r["rank"]: r["host"] for r in reader.ranks(runs[0]["cluster_id"])}
        notebook, batch = _final(reader, notebook_run.run_id), _final(reader, runs[0]["id"])
    finally:
        reader.close()
    print(f"\nslurm job {took:.1f} s on {hosts}; notebook {notebook}, job {batch}")
    assert stored is not None and stored["state"] == "succeeded", stored
    assert sorted(hosts.values()) == ["h1", "h2"], hosts
    for rank in (0, 1):
        # One thread a rank in the notebook, the node's cores in the job: the same sums.
        assert batch[rank] == pytest.approx(notebook[rank], abs=1e-5)
