"""Panel actions go through the kernel that owns the cluster.

The kernel here is this test process's IPython shell: it starts a real cluster with
``%dist_cluster start``, which makes it watch the cluster's control requests. The
panel's REST calls then reach it: Interrupt cancels the run in progress and keeps the
cluster; Stop cancels the run and stops the cluster as ``%dist_cluster stop`` does, and
the next ``%dist_cluster start`` works.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from wireshape import assert_shape

from dist_notebook import contracts
from dist_notebook.magics.session import Session
from dist_notebook.store import StoreReader

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

API = ("dist-notebook", "api")
# A run that goes on for a minute unless something stops it.
LONG_RUN = """
import time
for step in range(600):
    time.sleep(0.1)
    report(step=step, loss=1.0 / (step + 1), samples=8)
    print("step", step)
"""


async def post(jp_fetch: Any, cluster_id: str, action: str) -> dict[str, Any]:
    response = await jp_fetch(*API, "clusters", cluster_id, action, method="POST", body=b"")
    return json.loads(response.body)  # type: ignore[no-any-return]


async def until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def start_run(shell: Any, session: Session, name: str) -> Any:
    shell.run_cell_magic("dist_train", f"--name {name} --background --no-dashboard", LONG_RUN)
    run = session.run
    await until(lambda: len(run.metrics.records(0)) > 2, 60, "the run's first records")
    return run


def stored_run(run_id: str) -> dict[str, Any]:
    reader = StoreReader()
    try:
        found = reader.run(run_id)
        assert found is not None
        return found
    finally:
        reader.close()


async def test_panel_interrupt_and_stop_through_the_owning_kernel(
    jp_fetch: Any, no_cluster: Any
) -> None:
    shell = no_cluster
    session = Session.for_shell(shell)
    shell.run_line_magic("dist_cluster", "start -n 2 --cpu")
    cluster = session.cluster
    assert cluster is not None
    try:
        run = await start_run(shell, session, "ctl-interrupt")
        # A real cluster's row (its ranks with engine ids and nodes) as the panel gets it.
        response = await jp_fetch(*API, "clusters", cluster.id)
        assert_shape(json.loads(response.body), contracts.ClusterModel)
        reply = await post(jp_fetch, cluster.id, "interrupt")
        assert reply["via"] == "kernel" and reply["result"] == "run ctl-interrupt cancelled"
        assert_shape(reply, contracts.ActionReply)
        await until(lambda: run.state.value == "cancelled", 60, "the run to be cancelled")
        stored = stored_run(run.id)
        assert stored["state"] == "cancelled"
        # The panel's run tab gets the flags and the last lines of each rank's output.
        assert stored["flags"] == "--name ctl-interrupt --background --no-dashboard"
        assert set(stored["output"]) == {"0", "1"} and "step 2\n" in stored["output"]["0"]
        # The cluster is still the user's: ready, and it runs the next cell.
        await until(lambda: cluster.state.value == "ready", 30, "a ready cluster")
        assert shell.run_line_magic("dist_pull", "rank + 40 --rank 1") == 41

        run = await start_run(shell, session, "ctl-stop")
        reply = await post(jp_fetch, cluster.id, "stop")
        assert reply == {
            "id": cluster.id,
            "action": "stop",
            "state": "stopped",
            "via": "kernel",
            "result": "stopped",
        }
        assert run.state.value == "cancelled" and stored_run(run.id)["state"] == "cancelled"
        assert cluster.state.value == "stopped"
        # a second Stop does nothing; the kernel starts a new cluster at once
        assert (await post(jp_fetch, cluster.id, "stop"))["via"] == "none"
        shell.run_line_magic("dist_cluster", "start -n 2 --cpu")
        assert session.cluster is not cluster and session.cluster.state.value == "ready"
    finally:
        if session.cluster is not None:
            session.cluster.stop_sync()
        cluster.stop_sync()


async def test_a_scripts_cluster_answers_the_panel_and_its_stop_refills_the_pool(
    jp_fetch: Any,
) -> None:
    """A cluster started with the Python API, no magic involved (as a plain script
    does), has an owner: the panel's Interrupt and Stop reach it (they were answered
    409 when the owner lived in the magics), and a Stop starts the spare of a spec kept
    warm, as %dist_cluster stop does."""
    from dist_notebook import ClusterSpec, DistCluster
    from dist_notebook.cluster import pool

    spec = ClusterSpec(n=2)
    cluster = DistCluster(spec)
    cluster.start_sync()
    try:
        pool.keep_warm(spec, now=False)
        reply = await post(jp_fetch, cluster.id, "interrupt")
        assert reply["via"] == "kernel" and reply["result"] == "ranks interrupted"
        reply = await post(jp_fetch, cluster.id, "stop")
        assert (reply["via"], reply["state"], reply["result"]) == ("kernel", "stopped", "stopped")
        assert cluster.state.value == "stopped"
        assert [s.spec for s in pool.spares()] == [spec]  # the pool's spare, starting
        spare = pool.take(spec, lambda *_: None, timeout=120)
        assert spare is not None and spare.state.value == "ready"
        spare.stop_sync()
    finally:
        pool.clear()
        cluster.stop_sync()
