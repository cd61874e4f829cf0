"""``%dist_export --ray-job`` on the tests' Ray head (loopback, 4 CPUs; Ray's job server
runs in the head): the notebook trains on two Ray-placed CPU ranks with fixed seeds; the
exported script goes to Ray Jobs by the printed ``ray job submit`` line, run as a user
pastes it (from another folder); the job's torchrun trains to the notebook's final loss on
each rank, its run is in the run store beside the notebook's, and Ray uploaded the script
and its pushed values only (not the rest of their folder).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from . import raystate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

STEPS = 20
DATA = """%%dist
import torch
from sklearn.datasets import load_digits
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
Xr, yr = X[rank::world_size], y[rank::world_size]
"""
KERNEL = "lr = 0.2\ndef lr_at(step):\n    return lr * 0.98 ** step\n"
TRAIN = f"""%%dist_train --name rayjob-digits --steps {STEPS} --no-dashboard
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10)))
opt = torch.optim.SGD(model.parameters(), lr=lr_at(0))
gen = torch.Generator().manual_seed(1000 + rank)
for step in range({STEPS}):
    idx = torch.randint(0, len(Xr), (64,), generator=gen)
    loss = nn.functional.cross_entropy(model(Xr[idx]), yr[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
    for group in opt.param_groups:
        group["lr"] = lr_at(step + 1)
    report(step=step, loss=loss, samples=64)
"""
# In the job: what Ray uploaded (its working folder is the job's own folder).
LISTING = "%%dist --ranks 0\nimport os\nprint('uploaded:', sorted(os.listdir('.')))\n"


def _cell(shell: Any, text: str, cell_id: str) -> None:
    result = shell.run_cell(text, store_history=True, cell_id=cell_id)
    assert result.success, (text, result.error_before_exec, result.error_in_exec)


def _final_losses(reader: Any, run_id: str) -> dict[int, float]:
    last: dict[int, tuple[int, float]] = {}
    for rec in reader.records(run_id):
        if rec.step is not None and (rec.rank not in last or rec.step >= last[rec.rank][0]):
            last[rec.rank] = (rec.step, rec.metrics["loss"])
    return {rank: loss for rank, (_, loss) in last.items()}


@pytest.fixture(scope="module")
def trained(shell: Any, ray_head: str) -> Iterator[Any]:
    """Two Ray-placed CPU ranks that ran this module's cells; the training's result."""
    from dist_notebook.magics.history import history_of

    with raystate.ray_cluster(shell, ray_head):
        history_of(shell).entries.clear()  # this module's cells only
        with capture_output():
            _cell(shell, DATA, "data")
            _cell(shell, KERNEL, "kernel")
            _cell(shell, "%dist_push lr lr_at\n", "push")
            _cell(shell, TRAIN, "train")
            _cell(shell, LISTING, "listing")
        run = shell.magics_manager.registry["TrainMagics"].last_result
        assert run is not None and run.state.value == "succeeded"
        yield run


def test_the_ray_job_trains_to_the_notebooks_loss(
    shell: Any, trained: Any, tmp_path: Path, throwaway_store: str, ray_head: str
) -> None:
    from dist_notebook.store import StoreReader

    (tmp_path / "data.bin").write_bytes(os.urandom(1 << 20))  # not the job's: not uploaded
    target = tmp_path / "digits.py"
    with capture_output() as cap:
        shell.run_line_magic("dist_export", f"{target} --ray-job")
    out = cap.stdout
    assert "wrote " in out and "digits.rayjob.yaml (the Ray job's runtime env: uploads" in out
    assert "uploads digits.py, digits.values.pkl, records the run" in out, out
    assert "(2 rank(s) on one Ray node, 2 CPU(s)):" in out, out
    (line,) = [x.strip() for x in out.splitlines() if x.strip().startswith("ray job submit")]
    words = shlex.split(line)
    assert words[words.index("--working-dir") + 1] == str(tmp_path)
    assert words[words.index("--") + 1 :] == [
        "torchrun",
        "--standalone",
        "--nproc-per-node",
        "2",
        "digits.py",
    ]
    address = words[words.index("--address") + 1]
    assert address.startswith("http://127.0.0.1:"), address  # the head's dashboard

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    words[0] = str(Path(sys.executable).with_name("ray"))  # the `ray` of this environment
    t0 = time.perf_counter()
    job = subprocess.run(
        words, cwd=elsewhere, capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    job_s = time.perf_counter() - t0
    log = job.stdout[-4000:] + job.stderr[-3000:]
    assert job.returncode == 0, log
    assert "uploaded: ['digits.py', 'digits.values.pkl']" in job.stdout, log
    assert "succeeded" in job.stdout, log

    reader = StoreReader(Path(throwaway_store))
    try:
        batch = [
            r
            for r in reader.runs()
            if r["cluster_id"].startswith("batch-") and r["name"] == "rayjob-digits"
        ]
        assert len(batch) == 1, batch
        stored = reader.run(batch[0]["id"])
        assert stored is not None and stored["state"] == "succeeded", stored
        assert [r["state"] for r in stored["ranks"]] == ["done", "done"]
        notebook_loss = _final_losses(reader, trained.run_id)
        job_loss = _final_losses(reader, stored["id"])
        records = len(reader.records(stored["id"]))
    finally:
        reader.close()
    print(f"\nnotebook final loss {notebook_loss}, ray job {job_loss}; job {job_s:.1f} s")
    assert records == 2 * STEPS
    assert set(job_loss) == {0, 1}
    for rank in (0, 1):
        assert job_loss[rank] == pytest.approx(notebook_loss[rank], abs=1e-6)


def _refused(shell: Any, line: str) -> str:
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("dist_export", line)
    message = str(info.value)
    assert "\n" not in message and message.startswith("%dist_export"), message
    return message


def test_refusals_write_nothing(shell: Any, trained: Any, tmp_path: Path) -> None:
    target = tmp_path / "t.py"
    assert "drop --nodes" in _refused(shell, f"{target} --ray-job --nodes 2")
    assert "add --ray-job" in _refused(shell, f"{target} --address http://h:8265")
    assert "shape the sbatch file: add --sbatch" in _refused(
        shell, f"{target} --ray-job --partition gpu"
    )
    (tmp_path / "t.rayjob.yaml").write_text("mine\n")
    assert "t.rayjob.yaml exists: pass --force" in _refused(shell, f"{target} --ray-job")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.rayjob.yaml"]
    assert (tmp_path / "t.rayjob.yaml").read_text() == "mine\n"
