"""%dist_run: a torchrun-style script runs unchanged on every rank, twice in a row."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from ranklines import printed_by

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
    assert printed_by(out, "3.0") == {0, 1}  # one folded line, or a line per rank


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


# Rank 1 fails while rank 0 waits for it in an all_reduce of the script's own group
# (torch's default timeout: 30 minutes).
FAILS_IN_COLLECTIVE = """
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    time.sleep(0.5)
    {failure}
t = torch.ones(1)
dist.all_reduce(t)
print("not reached")
"""

# Rank 1 fails at the top, before its init_process_group(), while rank 0 waits for it in
# the rendezvous (torch's default timeout: 30 minutes; SIGINT does not free it).
FAILS_BEFORE_RENDEZVOUS = """
import os
import sys
import time

import torch
import torch.distributed as dist

if os.environ["RANK"] == "1":
    {failure}
t0 = time.monotonic()
try:
    dist.init_process_group("gloo")
finally:
    print(f"left the rendezvous after {{time.monotonic() - t0:.2f}} s")
print("not reached")
"""


def released_within_seconds(out: str, took: float) -> None:
    # Released within seconds, not the 30-minute default (bound generous for a busy host).
    assert took < 20, f"the cell took {took:.1f} s"


def left_the_rendezvous_within_5_s(out: str, took: float) -> None:
    # Rank 0's own measure of its wait in the rendezvous: 5 s at most.
    waited = re.search(r"\[rank 0\] left the rendezvous after ([0-9.]+) s", out)
    assert waited is not None, out
    assert float(waited.group(1)) < 5, out


# Where rank 0 waits for rank 1: the script, and how fast rank 0 must be released.
WAITS = {
    "in-a-collective": ("stuck.py", FAILS_IN_COLLECTIVE, released_within_seconds),
    "in-the-rendezvous": ("early.py", FAILS_BEFORE_RENDEZVOUS, left_the_rendezvous_within_5_s),
}


@pytest.mark.parametrize("wait", list(WAITS))
@pytest.mark.parametrize(
    ("failure", "exit_1"),
    [("raise ValueError('bad batch')", 1), ("sys.exit(2)", 2)],
    ids=["raises", "exits"],
)
def test_script_failing_on_one_rank_releases_its_waiting_peer(
    shell: Any,
    cluster2: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    wait: str,
    failure: str,
    exit_1: int,
) -> None:
    name, source, released = WAITS[wait]
    script = tmp_path / name
    script.write_text(source.format(failure=failure))
    t0 = time.monotonic()
    with pytest.raises(UsageError, match=rf"{re.escape(name)} failed on rank"):
        shell.run_line_magic("dist_run", str(script))
    took = time.monotonic() - t0
    out = capsys.readouterr().out
    released(out, took)
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line[:1].isdigit()}
    assert rows["0"][0] != "0" and rows["0"][1] == "failed", out
    assert rows["1"] == [str(exit_1), "failed"], out
    assert "not reached" not in out
    group_still_works(shell, capsys)


def test_script_imports_a_module_beside_it(
    shell: Any, cluster2: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As pytorch/examples' DDP tutorial: `from datautils import ...` next to the script.
    (tmp_path / "datautils_t12.py").write_text("SIZE = 7\n")
    script = tmp_path / "uses_helper.py"
    script.write_text("import datautils_t12\nprint('size', datautils_t12.SIZE)\n")
    shell.run_line_magic("dist_run", str(script))
    out = capsys.readouterr().out
    assert "[rank 0] size 7" in out and "[rank 1] size 7" in out
    # The script's directory does not stay on the ranks' path.
    assert (
        shell.run_line_magic("dist_pull", f"{str(tmp_path)!r} in __import__('sys').path") is False
    )


def test_cuda_script_on_cpu_ranks_says_how_to_get_gpus(
    shell: Any, cluster2: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "gpu_only.py"
    script.write_text("import os, torch\ntorch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n")
    with pytest.raises(UsageError, match=r"gpu_only.py failed on rank 0"):
        shell.run_line_magic("dist_run", str(script))
    err = capsys.readouterr().err
    assert "the ranks have no GPU" in err and "%dist_cluster start --gpus" in err
