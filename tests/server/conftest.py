"""Fixtures for the server extension's tests: a run store filled by hand, a real cluster.

The jp_* fixtures come from pytest-jupyter's server plugin, which the top-level
conftest registers (pytest_plugins = ["pytest_jupyter.jupyter_server"]).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dist_notebook.protocol import Record
from dist_notebook.store import StoreWriter

CLUSTER = "c-test"
RUNNING = "r-running"
DONE = "r-done"
STEPS = 10


@pytest.fixture
def jp_server_config() -> dict:
    return {"ServerApp": {"jpserver_extensions": {"dist_notebook.server": True}}}


@pytest.fixture
def store_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The run store's location for this test; the file itself is not created."""
    path = tmp_path / "store" / "runs.sqlite"
    monkeypatch.setenv("DIST_NOTEBOOK_STORE", str(path))
    return path


@pytest.fixture
def writer(store_file: Path) -> Iterator[StoreWriter]:
    w = StoreWriter(store_file)
    yield w
    w.close()


@pytest.fixture
def filled_store(writer: StoreWriter) -> StoreWriter:
    """One cluster of two ranks, one finished run and one run half way through."""
    fill(writer)
    return writer


def fill(writer: StoreWriter) -> None:
    writer.add_cluster(
        CLUSTER,
        n=2,
        backend="gloo",
        kernel_pid=os.getpid(),
        profile_dir="/nonexistent/profile",
        ipp_cluster_id="none",
    )
    writer.set_cluster_state(CLUSTER, "ready")
    writer.set_ranks(
        CLUSTER,
        [
            {"rank": 0, "host": "localhost", "pid": 101, "device": "cpu", "state": "busy"},
            {"rank": 1, "host": "localhost", "pid": 102, "device": "cpu", "state": "busy"},
        ],
    )
    writer.add_run(DONE, name="warmup", cluster_id=CLUSTER, ranks=[0, 1], steps=5, code="pass")
    writer.set_run_state(DONE, "running")  # runs move only along the protocol's transitions
    writer.set_run_state(DONE, "succeeded")
    time.sleep(0.01)  # runs are listed newest first by start time
    writer.add_run(RUNNING, name="train", cluster_id=CLUSTER, ranks=[0, 1], steps=STEPS, code="x")
    writer.set_run_state(RUNNING, "running")
    add_steps(writer, RUNNING, range(STEPS // 2))


def add_steps(writer: StoreWriter, run_id: str, steps: range) -> None:
    now = time.time()
    writer.append_metrics(
        run_id,
        [
            Record(
                rank=rank,
                step=step,
                time=now + step * 0.1,
                step_time=0.1 if step else None,
                samples=32.0 - rank * 10,
                metrics={"loss": 2.0 / (step + 1) + rank * 0.1},
            )
            for step in steps
            for rank in (0, 1)
        ],
    )


def dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@dataclass
class LiveCluster:
    """A real ipyparallel cluster recorded in the run store."""

    id: str
    cluster: object
    client: object
    pids: list[int]


def _our_launchers() -> dict:
    """The launchers dist_notebook's clusters use (registered as ipyparallel entry points)."""
    from dist_notebook.cluster.launchers import OurControllerLauncher, RankEngineSetLauncher

    return {
        "controller_launcher_class": OurControllerLauncher,
        "engine_launcher_class": RankEngineSetLauncher,
    }


@pytest.fixture(params=["builtin", "ours"])
def live_cluster(writer: StoreWriter, request: pytest.FixtureRequest) -> Iterator[LiveCluster]:
    """Two local engines on loopback, their pids, and the cluster's row in the store.

    "ours": dist_notebook's own launchers, which the cluster file must name in a form
    that loads back (they are registered as entry points).
    """
    import ipyparallel as ipp

    launchers = _our_launchers() if request.param == "ours" else {}
    from dist_notebook.cluster.profiles import own_profile_dir

    cluster = ipp.Cluster(
        n=2,
        # Where the clusters of dist_notebook keep theirs: the server acts only there.
        profile_dir=own_profile_dir(f"live-{request.param}"),
        controller_ip="127.0.0.1",
        **launchers,
        # a short heartbeat makes the controller confirm the engines in ~3 s, not ~7 s
        controller_args=["--HeartMonitor.period=500"],
        log_level=30,
    )
    cluster.start_cluster_sync()
    client = cluster.connect_client_sync()
    try:
        client.wait_for_engines(2, timeout=60)
        pids = client[:].apply_sync(os.getpid)
        # Recorded as owned by a kernel that is gone: the server acts on it itself.
        writer.add_cluster(
            "c-live",
            n=2,
            backend="gloo",
            kernel_pid=dead_pid(),
            profile_dir=cluster.profile_dir,
            ipp_cluster_id=cluster.cluster_id,
        )
        writer.set_cluster_state("c-live", "ready")
        writer.set_ranks(
            "c-live",
            [
                {"rank": i, "host": "localhost", "pid": pid, "device": "cpu", "state": "idle"}
                for i, pid in enumerate(pids)
            ],
        )
        yield LiveCluster("c-live", cluster, client, pids)
    finally:
        client.close()
        cluster.stop_cluster_sync()
