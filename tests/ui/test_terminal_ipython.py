"""Terminal IPython (no kernel, no widgets), its stdout a real terminal (a pty): a
``%%dist_train`` on 2 CPU gloo ranks writes its progress line in place (``\\r`` and a
line clear), the step going up, then the run's summary; and the cluster is stopped when
IPython exits.

(Here with the other front ends' tests; it needs no chromium.)
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TRAIN = """import time
from dist_notebook import report
for i in range(150):
    report(step=i, loss=1.0 / (i + 1) + rank, samples=32)
    time.sleep(0.04)
"""
# A script's cell magic comes as IPython runs a typed cell's (one file is one cell here)
SCRIPT = f"""%load_ext dist_notebook
%dist_cluster start -n 2 --cpu
get_ipython().run_cell_magic("dist_train", "--name term --steps 150", {TRAIN!r})
"""
IN_PLACE = re.compile(r"\r\x1b\[K(term: running[^\r\n]*)")


def add_tree(tree: dict[tuple[int, float], psutil.Process], pid: int) -> None:
    """Add each descendant of *pid* now running to *tree*, keyed by pid and start time."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return  # it has exited: its tree is what the earlier samples saw
    for child in children:
        try:
            tree.setdefault((child.pid, child.create_time()), child)
        except psutil.NoSuchProcess:
            continue  # ended between the listing and the look


def run_on_a_terminal(
    script: Path, env: dict[str, str], limit: float
) -> tuple[int, str, list[psutil.Process]]:
    """Run terminal IPython on *script* with stdout and stderr on a pty; its exit status,
    all it wrote, and every process of its tree seen while it ran (sampled each 0.5 s)."""
    leader, follower = pty.openpty()
    ipython = Path(sys.executable).with_name("ipython")
    proc = subprocess.Popen(
        [str(ipython), "--colors=NoColor", "--no-banner", str(script)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
        cwd=script.parent,
        start_new_session=True,
    )
    os.close(follower)
    chunks: list[bytes] = []
    tree: dict[tuple[int, float], psutil.Process] = {}
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            add_tree(tree, proc.pid)
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # EIO: the terminal's last writer closed it
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        else:
            raise AssertionError(f"ipython still running after {limit} s: {b''.join(chunks)!r}")
        status = proc.wait(timeout=60)
        return status, b"".join(chunks).decode(errors="replace"), list(tree.values())
    finally:
        os.close(leader)
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


def test_terminal_ipython_writes_the_progress_in_place_then_the_summary(tmp_path: Path) -> None:
    script = tmp_path / "train.ipy"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env.update(
        IPYTHONDIR=str(tmp_path / "ipython"),
        CUDA_VISIBLE_DEVICES="",
        DIST_NOTEBOOK_STORE=str(tmp_path / "runs.sqlite"),
        TERM="xterm",
    )
    status, out, tree = run_on_a_terminal(script, env, limit=240)
    assert status == 0, out
    lines = IN_PLACE.findall(out)
    steps = [int(m.group(1)) for line in lines if (m := re.search(r"step (\d+)/150", line))]
    assert len(steps) >= 2, f"in-place progress lines: {lines!r}\n{out}"
    assert steps == sorted(steps) and steps[-1] > steps[0], steps
    assert all("samples/s" in line for line in lines), lines
    end = out.rsplit("\r\x1b[K", 1)[-1]  # what came after the last in-place line
    assert re.search(r"term: succeeded in [\d.]+ s", end), end
    assert "Traceback" not in out, out
    # IPython's whole process tree (the controller, the fork server, the ranks: their
    # pids in the cluster's table among them) is gone once IPython has exited
    pids = {int(p) for p in re.findall(r"^[01] +\S+ +(\d+) +cpu", out, re.M)}
    assert len(pids) == 2, out
    assert pids <= {p.pid for p in tree}, f"ranks {pids} not seen in the tree {tree}"
    _, alive = psutil.wait_procs(tree, timeout=20)
    left = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"left running after IPython's exit: {left}"
