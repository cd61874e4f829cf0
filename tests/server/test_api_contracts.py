"""Each answer of the REST API, from a real Jupyter server, has exactly the keys that
dist_notebook/contracts.py declares (and so extension/src/contracts.ts, generated from it).

The actions' answers through a kernel and through the server are checked where real
clusters are: tests/server/test_control.py and test_actions.py.
"""

from __future__ import annotations

import json
import os
from typing import Any

from wireshape import assert_shape

from dist_notebook import contracts
from dist_notebook.detached.keeper import detached_note
from dist_notebook.export.stored import export_stored
from dist_notebook.protocol import RunSummary, summarize_run
from dist_notebook.store import StoreWriter
from dist_notebook.store.reader import DETACHED_EVENT

from .conftest import CLUSTER, DONE, RUNNING

API = ("dist-notebook", "api")


async def answer(jp_fetch: Any, *parts: str, method: str = "GET", **kwargs: Any) -> Any:
    response = await jp_fetch(*API, *parts, method=method, **kwargs)
    assert response.code == 200
    return json.loads(response.body)


async def test_every_read_answer_has_the_declared_keys(
    jp_fetch: Any, filled_store: StoreWriter, tmp_path: Any
) -> None:
    # A detached cluster beside the kernel's own, and a run exported to TensorBoard.
    filled_store.add_cluster(
        "c-kept", n=1, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    filled_store.add_event(DETACHED_EVENT, detached_note(600.0), cluster_id="c-kept")
    filled_store.add_event("output", "loss 0.1\n", run_id=DONE, rank=1)
    export_stored(filled_store.path, DONE, "tensorboard", tmp_path / "tb")

    clusters = await answer(jp_fetch, "clusters")
    assert {c["id"] for c in clusters} == {CLUSTER, "c-kept"}
    assert any(c["detached"] for c in clusters) and any(c["ranks"] for c in clusters)
    assert_shape(clusters, list[contracts.ClusterModel])
    assert_shape(await answer(jp_fetch, "clusters", CLUSTER), contracts.ClusterModel)
    runs = await answer(jp_fetch, "runs")
    assert len(runs) == 2
    assert_shape(runs, list[contracts.RunModel])
    done = await answer(jp_fetch, "runs", DONE)
    assert done["exports"] and done["exports"][0]["tool"] == "tensorboard" and done["output"]
    assert_shape(done, contracts.RunDetailModel)
    assert_shape(await answer(jp_fetch, "runs", RUNNING), contracts.RunDetailModel)
    page = await answer(jp_fetch, "runs", RUNNING, "metrics", params={"limit": "3"})
    assert page["records"] and page["more"]
    assert_shape(page, contracts.MetricsPage)
    # The summary's own keys are protocol.py's (its TypeScript is generated there).
    summary = await answer(jp_fetch, "runs", RUNNING, "summary")
    assert set(summary) == set(summarize_run("r", "running", None, []).to_json())
    assert set(summary) == set(RunSummary.__dataclass_fields__)


async def test_every_write_answer_has_the_declared_keys(
    jp_fetch: Any, filled_store: StoreWriter
) -> None:
    filled_store.set_cluster_state(CLUSTER, "stopping")
    filled_store.set_cluster_state(CLUSTER, "stopped")
    stop = await answer(jp_fetch, "clusters", CLUSTER, "stop", method="POST", body=b"")
    assert stop["via"] == "none"
    assert_shape(stop, contracts.ActionReply)
    deleted = await answer(jp_fetch, "runs", DONE, method="DELETE")
    assert_shape(deleted, contracts.DeleteReply)
    pruned = await answer(jp_fetch, "runs", "prune", method="POST", body=b'{"before": 1e12}')
    assert_shape(pruned, contracts.PruneReply)
