"""Real kernels (jupyter_client's KernelManager), each with a cluster: two at once, a
kernel shut down, a kernel SIGKILLed in the middle of a run. No process of ours may
outlive its kernel, and every metric the kernel had received must be in the store."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ranklines import printed_by

from dist_notebook.store import StoreReader

from .conftest import ALL_REDUCE, Kernel, wait_gone

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Kernel]]:
    """Two kernels, each with its own 2-rank cluster and run store, started together."""
    root = tmp_path_factory.mktemp("kernels")
    made: list[Kernel] = []
    errors: list[BaseException] = []

    def start(index: int) -> None:
        try:
            kernel = Kernel(str(root / f"store-{index}.sqlite"))
            made.append(kernel)
            kernel.start_cluster()
        except BaseException as e:  # noqa: BLE001 - reported by the fixture
            errors.append(e)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    try:
        assert not errors, errors
        assert len(made) == 2
        yield sorted(made, key=lambda k: k.store)
    finally:
        for kernel in made:
            kernel.close()


def test_two_kernels_two_clusters_at_once(kernels: list[Kernel]) -> None:
    a, b = kernels
    assert set(a.cluster_pids).isdisjoint(b.cluster_pids)
    outputs: dict[str, tuple[str, list[str]]] = {}

    def run(name: str, kernel: Kernel) -> None:
        outputs[name] = kernel.run("%%dist\n" + ALL_REDUCE, timeout=60)

    threads = [threading.Thread(target=run, args=(n, k)) for n, k in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    for name in "ab":
        out, errors = outputs[name]
        assert not errors, (name, errors)
        assert printed_by(out, "3") == {0, 1}, (name, out)


def test_kernel_shutdown_ends_its_cluster(kernels: list[Kernel]) -> None:
    a = kernels[0]
    pids = a.cluster_pids
    t0 = time.monotonic()
    a.km.shutdown_kernel(now=False)  # a shutdown request, as the notebook's "Shut down"
    left, _ = wait_gone(pids + [a.pid], 15)
    took = time.monotonic() - t0
    assert left == [], f"left running after the kernel's shutdown: {left}"
    from dist_notebook.cluster.reap import cluster_files

    # No file of the cluster either (its profile directory is its own: gone with it).
    assert cluster_files(a.info["profile"], a.info["ipp"]) == []
    assert took < 30  # bound for a loaded machine; bench/faults.py has the figure
    # Recorded for the report: the time from the request until the last process ended.
    print(f"kernel shutdown: every process gone after {took:.2f} s")


TRAIN = """%%dist_train --name durable --background --no-dashboard
import time
for step in range(100000):
    report(step=step, loss=1.0 / (step + 1))
    time.sleep(0.02)
"""


def test_killed_kernel_mid_run_leaves_no_orphan_and_keeps_metrics(kernels: list[Kernel]) -> None:
    b = kernels[1]
    out, errors = b.run(TRAIN, timeout=30)
    assert not errors, errors
    deadline = time.monotonic() + 30
    reader = None
    while time.monotonic() < deadline:  # wait until records reach the store steadily
        time.sleep(0.2)
        if reader is None and Path(b.store).exists():
            reader = StoreReader(Path(b.store))
        run = reader.find_run("durable") if reader else None
        if run and len(reader.metrics(run["id"])) > 60:  # type: ignore[union-attr]
            break
    else:
        pytest.fail("the run's records never reached the store")
    time.sleep(1.0)
    killed_at = time.time()
    os.kill(b.pid, signal.SIGKILL)
    left, gone = wait_gone(b.cluster_pids + [b.pid], 10)
    assert left == [], f"outlived the killed kernel: {left}"
    assert gone < 10, f"orphans took {gone:.2f} s to end"
    # The controller also removed the cluster's files (connection files hold its key).
    security = Path(b.info["profile"]) / "security"
    assert not list(security.glob(f"*{b.info['ipp']}*")), "files of the dead cluster are left"

    run = StoreReader(Path(b.store)).find_run("durable")
    assert run is not None
    records = StoreReader(Path(b.store)).metrics(run["id"])
    newest = max(r["time"] for r in records)
    # The collector flushes every 0.2 s: what it had received is on disk (bench/faults.py
    # measures the newest record's age; a loaded machine may delay the kernel's thread).
    assert killed_at - newest < 5, f"the newest stored record is {killed_at - newest:.2f} s old"
    for rank in (0, 1):
        steps = [r["step"] for r in records if r["rank"] == rank]
        assert steps == list(range(len(steps))), f"rank {rank} has gaps"
