"""A detached cluster outlives its kernel (issue #27): real kernels, a real SIGKILL.

A kernel starts ``%dist_cluster start --detach``, sets a variable on the ranks and starts
a ``--background`` run, and is SIGKILLed mid-run. A new kernel attaches: the variable is
there, the run goes on and ends with every record stored, a collective works, and stop
leaves no process of the keeper's whole tree and no file. A second kernel attaching
while one holds the cluster is refused with the holder named (``--force`` takes it, and
the first kernel is told at its next cell). With an idle timeout, a cluster nobody uses
stops by itself, leaving nothing.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from dist_notebook.store import StoreReader

from .conftest import Kernel, kill_all, wait_gone

pytestmark = pytest.mark.timeout(300)

STEPS = 60
TRAIN = f"""%%dist_train --background --name kept --steps {STEPS}
import time
import torch, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from dist_notebook import report
torch.manual_seed(0)
model = DDP(nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for i in range({STEPS}):
    x = torch.randn(32, 8)
    loss = (model(x) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    report(step=i, loss=loss, samples=32)
    time.sleep(0.1)
print('trained', rank)
"""
INFO = (
    "import json, os\n"
    "from dist_notebook.magics.session import Session\n"
    "_c = Session.for_shell(get_ipython()).cluster\n"
    "print('INFO ' + json.dumps({'id': _c.id, 'keeper': _c.keeper_pid,"
    " 'profile': _c.profile_dir, 'kernel': os.getpid()}))\n"
)


def info_of(kernel: Kernel) -> dict[str, Any]:
    out, errors = kernel.run(INFO)
    assert not errors, errors
    return json.loads(next(x for x in out.splitlines() if x.startswith("INFO "))[5:])


def shown(kernel: Kernel, code: str) -> str:
    """What *code* prints and displays (a table's text), as one text."""
    parts: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        content = msg["content"]
        if msg["msg_type"] == "stream":
            parts.append(content["text"])
        elif msg["msg_type"] in ("display_data", "execute_result"):
            parts.append(content["data"].get("text/plain", "") + "\n")
        elif msg["msg_type"] == "error":
            parts.append(f"{content['ename']}: {content['evalue']}\n")

    kernel.kc.execute_interactive(code, timeout=60, output_hook=hook)
    return "".join(parts)


def refused(kernel: Kernel, code: str) -> str:
    """The one-line refusal *code* gets (IPython shows a UsageError as one line)."""
    lines = [x for x in shown(kernel, code).splitlines() if x.startswith("UsageError: ")]
    assert len(lines) == 1, shown
    return lines[0]


def tree_of(pid: int) -> list[int]:
    """The keeper and every process under it (controller, schedulers, fork server,
    engines), by pid: what its stop must end."""
    keeper = psutil.Process(pid)
    return [pid] + [p.pid for p in keeper.children(recursive=True)]


def stored_run(store: str, name: str) -> dict[str, Any] | None:
    reader = StoreReader(Path(store))
    try:
        run = reader.find_run(name)
        if run is not None:
            run["records"] = len(reader.records(run["id"]))
        return run
    finally:
        reader.close()


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "runs.sqlite")


def test_a_killed_kernel_leaves_the_cluster_and_its_run_to_the_next(store: str) -> None:
    first = Kernel(store)
    second: Kernel | None = None
    tree: list[int] = []
    try:
        out, errors = first.run("%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu --detach")
        assert not errors, errors
        assert "is detached" in out, out
        info = info_of(first)
        tree = tree_of(info["keeper"])
        assert len(tree) >= 1 + 1 + 2, f"keeper, controller and engines expected: {tree}"
        out, errors = first.run("%%dist\nsecret = 100 + rank\nprint('set', secret)")
        assert not errors, errors
        out, errors = first.run(TRAIN)
        assert not errors, errors
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # the run trains: records reach the store
            run = stored_run(store, "kept")
            if run is not None and run["records"] >= 10:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the kept run never trained: {stored_run(store, 'kept')}")
        os.kill(first.pid, signal.SIGKILL)
        first.km.wait = lambda *a, **k: None  # type: ignore[method-assign]
        assert wait_gone([first.pid], 10)[0] == []
        assert all(psutil.pid_exists(p) for p in tree), "the kernel's death took the cluster"
        killed_at = stored_run(store, "kept")
        assert killed_at is not None and killed_at["state"] == "running", killed_at

        second = Kernel(store)
        t0 = time.monotonic()
        out = shown(second, "%load_ext dist_notebook\n%dist_cluster attach")
        attach_s = time.monotonic() - t0
        assert "Error" not in out, out
        assert f"attached to cluster {info['id']}" in out, out
        # the run's line is a display (it becomes the end's line): shown, not printed
        assert "run kept" in out and "in progress" in out, out
        out, errors = second.run("%%dist\nprint('secret', secret)")
        assert not errors, errors
        assert "secret 100" in out and "secret 101" in out, out
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            run = stored_run(store, "kept")
            if run is not None and run["state"] not in ("pending", "running"):
                break
            time.sleep(0.3)
        assert run is not None and run["state"] == "succeeded", run
        assert run["records"] == 2 * STEPS, run  # every record, those after the kill too
        out, errors = second.run(
            "%%dist\nt = torch.ones(1) * (rank + 1)\ndist.all_reduce(t)\nprint('sum', int(t))"
        )
        assert not errors, errors
        assert "sum 3" in out, out
        out = shown(second, "%dist_cluster list")
        assert info["id"] in out and f"kernel {second.pid} (this one)" in out, out
        print(f"attach {attach_s:.2f} s (with %load_ext), records {run['records']}")
        out, errors = second.run("%dist_cluster stop")
        assert not errors, errors
        left, took = wait_gone(tree, 30)
        assert left == [], f"processes of the detached cluster left: {left}"
        assert not Path(info["profile"]).exists(), "the cluster's folder was left"
    finally:
        for kernel in (first, second):
            if kernel is not None:
                kernel.close()
        kill_all(tree)


def test_a_second_kernel_is_refused_then_takes_over_with_force(store: str) -> None:
    first = Kernel(store)
    second = Kernel(store)
    tree: list[int] = []
    try:
        out, errors = first.run("%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu --detach")
        assert not errors, errors
        info = info_of(first)
        tree = tree_of(info["keeper"])
        refusal = refused(second, f"%load_ext dist_notebook\n%dist_cluster attach {info['id']}")
        assert f"attached to kernel pid {first.pid}" in refusal and "--force" in refusal, refusal
        out, errors = second.run(f"%dist_cluster attach {info['id'][:4]} --force")
        assert not errors, errors
        assert f"attached to cluster {info['id']}" in out, out
        # its keeper does not scale it: one line naming the fix, the cluster as it was
        refusal = refused(second, "%dist_cluster scale 3")
        assert "detached cluster keeps its size" in refusal and "-n 3 --detach" in refusal, refusal
        out, errors = second.run("%%dist\nprint(world_size)")
        assert not errors and "2" in out, (out, errors)
        refusal = refused(first, "%%dist\nprint(rank)")
        assert f"taken over by kernel pid {second.pid}" in refusal, refusal
        out, errors = second.run("%dist_cluster stop")
        assert not errors, errors
        assert wait_gone(tree, 30)[0] == []
    finally:
        first.close()
        second.close()
        kill_all(tree)


def test_an_idle_detached_cluster_stops_by_itself(store: str) -> None:
    kernel = Kernel(store)
    tree: list[int] = []
    try:
        out, errors = kernel.run(
            "%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu --detach --idle-timeout 5s"
        )
        assert not errors, errors
        assert "stops after 5 s unused" in out, out
        info = info_of(kernel)
        tree = tree_of(info["keeper"])
        out, errors = kernel.run("%dist_cluster detach")
        assert not errors, errors
        t0 = time.monotonic()
        left, _ = wait_gone(tree, 5 + 30)
        assert left == [], f"an idle cluster's processes stayed: {left}"
        gone = time.monotonic() - t0
        assert not Path(info["profile"]).exists()
        assert gone > 4, f"stopped after {gone:.1f} s, before its idle timeout"
        out = shown(kernel, "%dist_cluster list")
        assert "no detached cluster" in out, out
        print(f"idle cluster gone {gone:.1f} s after its kernel let go (timeout 5 s)")
    finally:
        kernel.close()
        kill_all(tree)


def test_idle_timeout_without_detach_is_refused(store: str) -> None:
    kernel = Kernel(store)
    try:
        refusal = refused(
            kernel, "%load_ext dist_notebook\n%dist_cluster start --cpu --idle-timeout 5m"
        )
        assert "add --detach" in refusal, refusal
        refusal = refused(kernel, "%dist_cluster start --cpu --detach --idle-timeout soon")
        assert "write it like 90s, 30m or 2h" in refusal, refusal
        refusal = refused(kernel, "%dist_cluster attach")
        assert "start one with %dist_cluster start --detach" in refusal, refusal
        refusal = refused(kernel, "%dist_cluster detach")
        assert "holds no detached cluster" in refusal, refusal
    finally:
        kernel.close()


def test_a_blocking_run_shows_its_output_and_the_panels_stop_ends_the_keeper(store: str) -> None:
    from dist_notebook.store.control import ControlQueue

    kernel = Kernel(store)
    tree: list[int] = []
    try:
        out, errors = kernel.run("%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu --detach")
        assert not errors, errors
        info = info_of(kernel)
        tree = tree_of(info["keeper"])
        text = shown(kernel, TRAIN.replace("--background", "--no-dashboard").replace("kept", "fg"))
        assert "[rank 0] trained 0" in text and "[rank 1] trained 1" in text, text
        assert "run fg" in text and "succeeded" in text, text
        run = stored_run(store, "fg")
        assert run is not None and run["records"] == 2 * STEPS, run
        assert run["output"].get("0", "").strip() == "trained 0", run["output"]
        queue = ControlQueue(Path(store))
        try:
            seq = queue.request(info["id"], "stop")  # as the panel's Stop does
            deadline = time.monotonic() + 60
            while queue.answer(seq)["done"] is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert queue.answer(seq)["result"] == "stopped", queue.answer(seq)
        finally:
            queue.close()
        assert wait_gone(tree, 30)[0] == []
        refusal = refused(kernel, "%%dist\nprint(rank)")
        assert f"cluster {info['id']} is gone" in refusal, refusal
    finally:
        kernel.close()
        kill_all(tree)
