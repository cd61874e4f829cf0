"""%dist_export end to end: a real 2-rank gloo cluster runs set-up cells (one of them
re-run with a change, one sent to rank 0 only, values pushed from the kernel) and a
%%dist_train cell with fixed seeds on sklearn's digits; the exported script, run by
``torchrun --standalone --nproc-per-node 2``, trains to the same final loss on every rank,
and its run is in the run store (and in %dist_runs) beside the notebook's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

STEPS = 30
DATA = """%%dist
import torch
from sklearn.datasets import load_digits
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
Xr, yr = X[rank::world_size], y[rank::world_size]
"""
MODEL_V1 = "%%dist\nhidden = 8  # the first version: replaced by its re-run\n"
MODEL_V2 = '%%dist\nhidden = 32\nbanner = """two\n  lines"""\n'
RANK0 = "%%dist --ranks 0\nonly_on_zero = True\n"
KERNEL = """
lr = 0.2
def lr_at(step):
    return lr * 0.98 ** step
"""
TRAIN = f"""%%dist_train --name export-digits --steps {STEPS} --no-dashboard
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10)))
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
assert banner == "two\\n  lines" and (rank != 0 or only_on_zero)
final = loss.item()
"""
AFTER = "%%dist\nprint(f'after the training: {final:.4f}')\n"


def _cell(shell: Any, text: str, cell_id: str) -> None:
    result = shell.run_cell(text, store_history=True, cell_id=cell_id)
    assert result.success, (text, result.error_before_exec, result.error_in_exec)


def _final_losses(reader: Any, run_id: str) -> dict[int, float]:
    last: dict[int, tuple[int, float]] = {}
    for rec in reader.records(run_id):
        if rec.step is not None and (rec.rank not in last or rec.step >= last[rec.rank][0]):
            last[rec.rank] = (rec.step, rec.metrics["loss"])
    return {rank: loss for rank, (_, loss) in last.items()}


def test_exported_script_trains_to_the_notebooks_loss_under_torchrun(
    shell: Any, cluster2: Any, tmp_path: Path, throwaway_store: str, capsys: Any
) -> None:
    from dist_notebook.magics.history import history_of
    from dist_notebook.store import StoreReader

    history_of(shell).entries.clear()  # this test's cells only (the cluster is shared)
    _cell(shell, DATA, "data")
    _cell(shell, MODEL_V1, "model")
    _cell(shell, RANK0, "rank0")
    _cell(shell, KERNEL, "kernel")
    _cell(shell, "%dist_push lr lr_at\n", "push")
    _cell(shell, MODEL_V2, "model")  # the re-run: its last version, at this place
    t0 = time.perf_counter()
    _cell(shell, TRAIN, "train")
    notebook_s = time.perf_counter() - t0
    _cell(shell, AFTER, "after")
    run = shell.magics_manager.registry["TrainMagics"].last_result
    assert run is not None and run.state.value == "succeeded"

    capsys.readouterr()
    target = tmp_path / "digits.py"
    t0 = time.perf_counter()
    shell.run_line_magic("dist_export", f"{target} --sbatch")
    export_s = time.perf_counter() - t0
    out = capsys.readouterr().out
    assert "digits.py: 4 %%dist cells (In [" in out, out
    # lr is used only inside lr_at, which carries it: not written on its own
    assert "1 pushed value (lr_at), then %%dist_train (In [" in out, out
    assert "run it: torchrun --standalone --nproc-per-node 2 digits.py" in out, out
    text = target.read_text()
    assert "hidden = 32" in text and "hidden = 8" not in text
    assert text.index("only_on_zero") < text.index("hidden = 32") < text.index("with job.run(")
    assert "if rank in (0,):\n    only_on_zero = True" in text
    assert "lr = 0.2" not in text and "lr_at = job.pushed('lr_at')" in text
    assert text.index("with job.run(") < text.index("after the training")
    assert (tmp_path / "digits.values.pkl").stat().st_mode & 0o077 == 0
    sbatch = (tmp_path / "digits.sbatch").read_text()
    assert "#SBATCH --job-name=dist-notebook-export-digits" in sbatch
    assert "#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1\n" in sbatch
    assert f"export DIST_NOTEBOOK_STORE={Path(throwaway_store).resolve()}" in sbatch
    assert f"--standalone --nproc-per-node=2 {target}" in sbatch

    env = dict(os.environ, DIST_NOTEBOOK_STORE=throwaway_store)
    torchrun = Path(sys.executable).with_name("torchrun")
    t0 = time.perf_counter()
    job = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", str(target)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    torchrun_s = time.perf_counter() - t0
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    assert "after the training" in job.stdout, job.stdout[-2000:]

    reader = StoreReader(Path(throwaway_store))
    try:
        batch = [r for r in reader.runs() if r["cluster_id"].startswith("batch-")]
        assert len(batch) == 1, batch
        stored = reader.run(batch[0]["id"])
        assert stored is not None and stored["state"] == "succeeded", stored
        assert stored["name"] == "export-digits"
        assert [r["state"] for r in stored["ranks"]] == ["done", "done"]
        notebook_loss = _final_losses(reader, run.run_id)
        batch_loss = _final_losses(reader, stored["id"])
        cluster = reader.cluster(stored["cluster_id"])
        assert cluster is not None and cluster["state"] == "stopped" and cluster["n"] == 2
        records = len(reader.records(stored["id"]))
    finally:
        reader.close()
    with capsys.disabled():  # the figures, for the note (pytest -s)
        print(
            f"\nnotebook final loss {notebook_loss}, torchrun {batch_loss}; export"
            f" {export_s * 1000:.0f} ms, notebook cell {notebook_s:.1f} s,"
            f" torchrun {torchrun_s:.1f} s"
        )
    assert records == 2 * STEPS
    assert set(batch_loss) == {0, 1}
    for rank in (0, 1):
        assert batch_loss[rank] == pytest.approx(notebook_loss[rank], abs=1e-6)

    capsys.readouterr()
    shell.run_line_magic("dist_runs", "")
    listed = capsys.readouterr().out
    assert stored["id"] in listed and run.run_id in listed, listed


FAILING = """%%dist_train --name export-fails --no-dashboard
import os
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    # Only under torchrun (the notebook's run succeeds): rank 1 fails at step 5.
    if rank == 1 and step == 5 and os.environ.get("TORCHELASTIC_RUN_ID"):
        raise ValueError(f"bad batch at step {step}")
    loss = nn.functional.cross_entropy(model(Xr[:64]), yr[:64])
    opt.zero_grad()
    loss.backward()
    opt.step()
    report(step=step, loss=loss)
"""


def test_a_failing_rank_is_recorded_with_its_error(
    shell: Any, cluster2: Any, tmp_path: Path, throwaway_store: str
) -> None:
    from dist_notebook.magics.history import history_of
    from dist_notebook.store import StoreReader

    history_of(shell).entries.clear()
    _cell(shell, DATA, "data")
    _cell(shell, FAILING, "train")
    target = tmp_path / "fails.py"
    shell.run_line_magic("dist_export", str(target))
    t0 = time.perf_counter()
    job = subprocess.run(
        [
            str(Path(sys.executable).with_name("torchrun")),
            "--standalone",
            "--nproc-per-node",
            "2",
            str(target),
        ],
        cwd=tmp_path,
        env=dict(os.environ, DIST_NOTEBOOK_STORE=throwaway_store),
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.perf_counter() - t0
    assert job.returncode != 0
    reader = StoreReader(Path(throwaway_store))
    try:
        runs = [
            r
            for r in reader.runs()
            if r["cluster_id"].startswith("batch-") and r["name"] == "export-fails"
        ]
        assert len(runs) == 1, runs
        stored = reader.run(runs[0]["id"])
        records = reader.records(runs[0]["id"])
    finally:
        reader.close()
    assert stored is not None and stored["state"] == "failed", (stored, job.stderr[-3000:])
    # The run's error is rank 1's own; rank 0, whose all-reduce lost its peer, is released.
    assert stored["error"] == "rank 1: ValueError: bad batch at step 5", stored["error"]
    states = {r["rank"]: r["state"] for r in stored["ranks"]}
    assert states == {0: "released", 1: "failed"}, states
    assert {r.step for r in records if r.rank == 1} == set(range(5))
    print(f"\nfailing job: {took:.1f} s, ranks {states}, error {stored['error']!r}")


LONG = """%%dist_train --name export-long --no-dashboard
import os
import time
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
# A long run under torchrun only (the notebook's is short).
for step in range(3000 if os.environ.get("TORCHELASTIC_RUN_ID") else 3):
    loss = nn.functional.cross_entropy(model(Xr[:64]), yr[:64])
    opt.zero_grad()
    loss.backward()
    opt.step()
    report(step=step, loss=loss)
    time.sleep(0.02)
"""


def _running_batch(store: str, name: str, timeout: float) -> dict[str, Any]:
    """The batch run *name* once it is running (its cluster row with it)."""
    from dist_notebook.store import StoreReader

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reader = StoreReader(Path(store))
        try:
            for r in reader.runs():
                if r["name"] == name and r["cluster_id"].startswith("batch-"):
                    if r["state"] == "running" and reader.records(r["id"]):
                        return {**r, "cluster": reader.cluster(r["cluster_id"])}
        finally:
            reader.close()
        time.sleep(0.3)
    pytest.fail(f"the batch run {name} was not running within {timeout} s")


def _start_long_job(shell: Any, tmp_path: Path, store: str) -> subprocess.Popen:
    from dist_notebook.magics.history import history_of

    history_of(shell).entries.clear()
    _cell(shell, DATA, "data")
    _cell(shell, LONG, "train")
    target = tmp_path / "long.py"
    shell.run_line_magic("dist_export", str(target))
    return subprocess.Popen(
        [
            str(Path(sys.executable).with_name("torchrun")),
            "--standalone",
            "--nproc-per-node",
            "2",
            str(target),
        ],
        cwd=tmp_path,
        env=dict(os.environ, DIST_NOTEBOOK_STORE=store),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _end(job: subprocess.Popen, timeout: float) -> str:
    try:
        out, _ = job.communicate(timeout=timeout)
        return out
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)
            job.wait(10)


def test_the_panels_stop_cancels_a_batch_run(
    shell: Any, cluster2: Any, tmp_path: Path, throwaway_store: str
) -> None:
    from dist_notebook.store import StoreReader
    from dist_notebook.store.control import ControlQueue

    job = _start_long_job(shell, tmp_path, throwaway_store)
    try:
        run = _running_batch(throwaway_store, "export-long", timeout=180)
        assert run["cluster"]["kernel_pid"] > 0  # one host: rank 0 owns it
        # What the server does for the panel's Stop (server/manager.py _through_owner).
        queue = ControlQueue(Path(throwaway_store))
        t0 = time.monotonic()
        try:
            seq = queue.request(run["cluster_id"], "stop")
            while queue.answer(seq)["done"] is None:
                assert time.monotonic() - t0 < 10, "rank 0 did not take the stop"
                time.sleep(0.1)
        finally:
            queue.close()
        out = _end(job, timeout=90)
        took = time.monotonic() - t0
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)
            job.wait(10)
    reader = StoreReader(Path(throwaway_store))
    try:
        stored = reader.run(run["id"])
        cluster = reader.cluster(run["cluster_id"])
        records = len(reader.records(run["id"]))
    finally:
        reader.close()
    print(f"\nstop to job end: {took:.1f} s; {records} records")
    assert stored is not None and stored["state"] == "cancelled", (stored, out[-3000:])
    assert cluster is not None and cluster["state"] == "stopped"
    assert records < 2 * 3000


def test_a_batch_job_killed_shows_its_run_orphaned(
    shell: Any, cluster2: Any, tmp_path: Path, throwaway_store: str
) -> None:
    from dist_notebook.store import StoreReader

    job = _start_long_job(shell, tmp_path, throwaway_store)
    try:
        run = _running_batch(throwaway_store, "export-long", timeout=180)
        os.kill(run["cluster"]["kernel_pid"], 9)  # rank 0, as the OOM killer would
        deadline = time.monotonic() + 30
        state = "running"
        while time.monotonic() < deadline and state != "orphaned":
            reader = StoreReader(Path(throwaway_store))
            try:
                found = reader.run(run["id"])
                state = found["state"] if found else "gone"
            finally:
                reader.close()
            time.sleep(0.2)
        assert state == "orphaned", state
    finally:
        _end(job, timeout=60)
