"""%dist_run: a torchrun-style script runs unchanged on every rank, twice in a row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

pytestmark = pytest.mark.timeout(90)

SCRIPT = '''
"""A script written for torchrun: its own process group, from the environment."""
import argparse
import os
import sys

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, required=True)
    parser.add_argument("--keep-group", action="store_true")
    args = parser.parse_args()
    assert os.path.basename(sys.argv[0]) == "allreduce.py", sys.argv
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"])
    t = torch.tensor([args.scale * (rank + 1)])
    dist.all_reduce(t)
    print(f"rank={rank} world={world} sum={t.item():g}")
    if not args.keep_group:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''

FAILS_ON_1 = """
import os
import sys

if __name__ == "__main__":
    print("checking", os.environ["RANK"])
    if os.environ["RANK"] == "1":
        sys.exit(3)
"""


def group_still_works(shell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    shell.run_cell_magic(
        "dist", "", "t = torch.tensor([rank + 1.0])\ndist.all_reduce(t)\nprint(t.item())"
    )
    out = capsys.readouterr().out
    assert "[rank 0] 3.0" in out and "[rank 1] 3.0" in out


def test_script_runs_twice_then_our_group_works(
    shell: Any, cluster2: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "allreduce.py"
    script.write_text(SCRIPT)
    shell.run_cell_magic("dist", "", "before_script = rank")
    # Twice in a row: the second run needs a fresh rendezvous; the second run leaves
    # its group behind, which %dist_run must tear down itself.
    for scale, extra in ((1, ""), (2, " --keep-group")):
        capsys.readouterr()
        shell.run_line_magic("dist_run", f"{script} --scale {scale}{extra}")
        out = capsys.readouterr().out
        for r in (0, 1):
            assert f"[rank {r}] rank={r} world=2 sum={3 * scale}" in out
        assert "allreduce.py" in out and "ok" in out
    group_still_works(shell, capsys)
    # The ranks' own namespaces survive a script run.
    assert shell.run_line_magic("dist_pull", "before_script --all") == {0: 0, 1: 1}


def test_script_failing_on_one_rank(
    shell: Any, cluster2: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "check.py"
    script.write_text(FAILS_ON_1)
    with pytest.raises(
        UsageError, match=r"check.py failed on rank 1 \(exit 3\); see its output above"
    ):
        shell.run_line_magic("dist_run", str(script))
    out = capsys.readouterr().out
    assert "[rank 0] checking 0" in out and "[rank 1] checking 1" in out
    group_still_works(shell, capsys)


def test_script_that_raises(
    shell: Any, cluster2: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "raises.py"
    script.write_text("raise RuntimeError('no data here')\n")
    with pytest.raises(UsageError, match=r"raises.py failed on rank 0 \(exit 1\)"):
        shell.run_line_magic("dist_run", str(script))
    err = capsys.readouterr().err
    assert "[rank 0] RuntimeError: no data here" in err
