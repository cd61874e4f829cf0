"""``%dist_export`` in a kernel that attached to a detached cluster (issue #42, item 8):
the history lives with the cluster (its keeper; pushed values owner-only in its folder).

Kernel 1 starts ``--detach``, pushes a plain value and a function, runs a ``%%dist``
cell, detaches and ends. Kernel 2 attaches, trains and evaluates on the ranks, and
exports: the script holds kernel 1's cells and values (said to be kernel 1's) and, run
by ``torchrun``, computes what the notebook's ranks did, to the same final loss.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dist_notebook.store import StoreReader

from .conftest import Kernel, kill_all
from .test_detach import info_of, shown, tree_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]

STEPS = 8
KERNEL_CODE = """
offset = 0.25
def scaled(x):
    return 3.0 * x + offset
"""
SETUP = "%%dist\nimport torch\nbase = torch.arange(4.0) * (rank + 1)\n"
TRAIN = f"""%%dist_train --name kept-export --steps {STEPS} --no-dashboard
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range({STEPS}):
    loss = ((model(base[None, :] * scaled(step)) - offset) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    report(step=step, loss=loss, samples=1)
final = loss.item()
"""
AFTER = "%%dist\nprint(f'RESULT {rank} {scaled(float(base.sum())):.4f} {final:.6f}')\n"


def results(text: str) -> dict[int, tuple[str, str]]:
    return {int(r): (v, f) for r, v, f in re.findall(r"RESULT (\d) (\S+) (\S+)", text)}


def test_a_kernel_that_attaches_exports_what_earlier_kernels_ran(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.sqlite")
    first = Kernel(store)
    second: Kernel | None = None
    tree: list[int] = []
    try:
        out, errors = first.run("%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu --detach")
        assert not errors, errors
        info = info_of(first)
        tree = tree_of(info["keeper"])
        for code in (KERNEL_CODE, "%dist_push offset scaled", SETUP, "%dist_cluster detach"):
            out, errors = first.run(code)
            assert not errors, (code, errors)
        first_pid = first.pid
        first.close()  # kernel 1 is gone: only the cluster keeps what it ran

        second = Kernel(store)
        out = shown(second, "%load_ext dist_notebook\n%dist_cluster attach")
        assert f"attached to cluster {info['id']}" in out, out
        for code in (TRAIN, AFTER):
            out, errors = second.run(code)
            assert not errors, (code, errors)
        notebook = results(out)
        assert set(notebook) == {0, 1}, out
        target = tmp_path / "kept.py"
        out = shown(second, f"%dist_export {target}")
        assert "Error" not in out, out
        assert "2 %%dist cells" in out and "2 pushed values (offset, scaled)" in out, out
        assert f"ran in kernel pid {first_pid}, before this kernel attached" in out, out
        text = target.read_text()
        assert text.index("base = torch.arange") < text.index("with job.run(")
        assert "offset = 0.25" in text and "scaled = job.pushed('scaled')" in text, text
        assert f"of kernel pid {first_pid}" in text, text
        values = tmp_path / "kept.values.pkl"
        assert values.stat().st_mode & 0o077 == 0

        job = subprocess.run(
            [str(Path(sys.executable).with_name("torchrun")), "--standalone"]
            + ["--nproc-per-node", "2", str(target)],
            cwd=tmp_path,
            env=dict(os.environ, DIST_NOTEBOOK_STORE=store),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        script = results(job.stdout)
        assert set(script) == {0, 1}, job.stdout[-2000:]
        for rank in (0, 1):
            assert script[rank][0] == notebook[rank][0]  # the pushed function, kernel 1's
            assert float(script[rank][1]) == pytest.approx(float(notebook[rank][1]), abs=1e-6)
        reader = StoreReader(Path(store))
        try:
            batch = [r for r in reader.runs() if r["cluster_id"].startswith("batch-")]
            assert [r["state"] for r in batch] == ["succeeded"], batch
        finally:
            reader.close()
        out, errors = second.run("%dist_cluster stop")
        assert not errors, errors
        assert not Path(info["profile"]).exists(), "the kept values outlived the cluster"
    finally:
        for kernel in (first, second):
            if kernel is not None:
                kernel.close()
        kill_all(tree)
