"""Objects a script leaves behind never freeze a rank (the %dist_run hang, under load).

The scenario: an unchanged torchrun-style DDP script (30 steps, an all_gather, then
destroy_process_group()) whose DDP model is freed as main() returns. With two busy
processes beside the ranks, about one run in three froze a rank for good: the model's
Reducer dropped the gloo group's last reference with the GIL held, and the group's
destructor waited for a worker that needed the GIL (engine/pgrelease.py). Every run
here must end, in well under a minute, with the cluster's own group working after.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from ranklines import printed_by

pytestmark = pytest.mark.timeout(300)

RUNS = 10  # the old code froze in 1 run of 3 under two hogs: 10 runs miss it 2% of times
PER_RUN_S = 60.0

SCRIPT = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(30):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(out, torch.tensor([loss.item()]))
    print("gathered", len(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()  # model, out and the group's last reference are freed as this returns
"""


def test_ddp_script_freed_after_main_never_freezes_a_rank(
    shell: Any, cluster2: Any, tmp_path: Path, cpu_hogs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "ddp_gather.py"
    script.write_text(SCRIPT)
    took = []
    for _ in range(RUNS):
        capsys.readouterr()
        t0 = time.perf_counter()
        shell.run_line_magic("dist_run", str(script))
        took.append(time.perf_counter() - t0)
        out = capsys.readouterr().out
        assert "[rank 0] gathered 2" in out and "[rank 1] gathered 2" in out, out
    assert max(took) < PER_RUN_S, took
    shell.run_cell_magic("dist", "", "t = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())")
    assert printed_by(capsys.readouterr().out, "2.0") == {0, 1}
