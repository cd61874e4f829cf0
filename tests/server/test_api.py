"""The REST API's read routes over a run store filled by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tornado.httpclient import HTTPClientError

from .conftest import CLUSTER, DONE, RUNNING, STEPS, add_steps, dead_pid

API = ("dist-notebook", "api")


async def get_json(jp_fetch, *parts, **params):
    response = await jp_fetch(*API, *parts, params=params or None)
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)


async def error_of(jp_fetch, *parts, method="GET", body=b"", **params):
    kwargs = {"body": body} if method == "POST" else {}
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*API, *parts, method=method, params=params or None, **kwargs)
    return info.value.code, json.loads(info.value.response.body)["message"]


async def test_no_store_means_empty_lists(jp_fetch, store_file):
    assert not store_file.exists()
    assert await get_json(jp_fetch, "clusters") == []
    assert await get_json(jp_fetch, "runs") == []
    assert (await error_of(jp_fetch, "runs", "nope"))[0] == 404
    assert (await error_of(jp_fetch, "runs", "nope", "metrics"))[0] == 404
    assert (await error_of(jp_fetch, "clusters", "nope", "stop", method="POST"))[0] == 404
    assert not store_file.exists(), "reading must not create the store"


async def test_clusters_with_ranks(jp_fetch, filled_store):
    clusters = await get_json(jp_fetch, "clusters")
    assert [c["id"] for c in clusters] == [CLUSTER]
    c = clusters[0]
    assert c["state"] == "ready"
    assert c["backend"] == "gloo"
    assert c["n"] == 2
    assert isinstance(c["started"], float)
    assert "profile_dir" not in c and "ipp_cluster_id" not in c
    assert [(r["rank"], r["host"], r["pid"], r["device"], r["state"]) for r in c["ranks"]] == [
        (0, "localhost", 101, "cpu", "busy"),
        (1, "localhost", 102, "cpu", "busy"),
    ]
    assert await get_json(jp_fetch, "clusters", CLUSTER) == c


async def test_ranks_name_their_node(jp_fetch, writer):
    writer.add_cluster(
        "multi", n=3, backend="gloo", kernel_pid=os.getpid(), profile_dir="/p", ipp_cluster_id="x"
    )
    hosts = [("h1", 0), ("h1", 0), ("h2", 1)]
    writer.set_ranks(
        "multi",
        [{"rank": r, "host": h, "pid": r, "node_rank": node} for r, (h, node) in enumerate(hosts)],
    )
    cluster = await get_json(jp_fetch, "clusters", "multi")
    assert [(r["host"], r["node_rank"]) for r in cluster["ranks"]] == hosts


async def test_runs_newest_first_and_filtered(jp_fetch, filled_store):
    runs = await get_json(jp_fetch, "runs")
    assert [r["id"] for r in runs] == [RUNNING, DONE]
    assert "code" not in runs[0]
    assert [r["id"] for r in await get_json(jp_fetch, "runs", state="succeeded")] == [DONE]
    assert [r["id"] for r in await get_json(jp_fetch, "runs", cluster=CLUSTER)] == [RUNNING, DONE]
    assert await get_json(jp_fetch, "runs", cluster="other") == []


async def test_one_run(jp_fetch, filled_store):
    run = await get_json(jp_fetch, "runs", RUNNING)
    assert run["name"] == "train"
    assert run["state"] == "running"
    assert run["steps"] == STEPS
    assert run["code"] == "x"
    assert [(r["rank"], r["state"]) for r in run["ranks"]] == [(0, "pending"), (1, "pending")]


async def test_metrics_are_incremental(jp_fetch, filled_store):
    first = await get_json(jp_fetch, "runs", RUNNING, "metrics")
    records = first["records"]
    assert first["since"] == 0
    assert first["more"] is False
    assert len(records) == STEPS  # half the steps, two ranks
    assert first["last_seq"] == records[-1]["seq"]
    assert {r["rank"] for r in records} == {0, 1}
    # protocol.Record.to_json(): system fields apart, the user's metrics under "metrics"
    assert set(records[0]) >= {"seq", "rank", "step", "time", "step_time", "samples", "metrics"}
    assert set(records[0]["metrics"]) == {"loss"}

    same = await get_json(jp_fetch, "runs", RUNNING, "metrics", since=first["last_seq"])
    assert same["records"] == [] and same["last_seq"] == first["last_seq"]

    add_steps(filled_store, RUNNING, range(STEPS // 2, STEPS))
    new = await get_json(jp_fetch, "runs", RUNNING, "metrics", since=first["last_seq"])
    assert len(new["records"]) == STEPS
    assert min(r["seq"] for r in new["records"]) > first["last_seq"]
    assert sorted({r["step"] for r in new["records"]}) == list(range(STEPS // 2, STEPS))


async def test_metrics_limit_pages(jp_fetch, filled_store):
    page = await get_json(jp_fetch, "runs", RUNNING, "metrics", limit=3)
    assert len(page["records"]) == 3 and page["more"] is True
    rest = await get_json(jp_fetch, "runs", RUNNING, "metrics", since=page["last_seq"])
    assert len(rest["records"]) == STEPS - 3 and rest["more"] is False


async def test_metrics_of_a_run_without_records(jp_fetch, filled_store):
    empty = await get_json(jp_fetch, "runs", DONE, "metrics", since=7)
    assert empty == {"run": DONE, "since": 7, "last_seq": 7, "more": False, "records": []}


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (("clusters", "nope"), "no cluster with id 'nope'"),
        (("runs", "nope"), "no run with id 'nope'"),
        (("runs", "nope", "metrics"), "no run with id 'nope'"),
    ],
)
async def test_unknown_ids_are_404(jp_fetch, filled_store, parts, message):
    assert await error_of(jp_fetch, *parts) == (404, message)


@pytest.mark.parametrize(
    ("parts", "params", "message"),
    [
        (("runs", RUNNING, "metrics"), {"since": "abc"}, "since must be an integer, not 'abc'"),
        (
            ("runs", RUNNING, "metrics"),
            {"since": "-1"},
            "since must be between 0 and 2**63 - 1, not -1",
        ),
        (
            ("runs", RUNNING, "metrics"),
            {"since": str(2**63)},
            f"since must be between 0 and 2**63 - 1, not {2**63}",
        ),
        (("runs", RUNNING, "metrics"), {"limit": "0"}, "limit must be between 1 and 50000, not 0"),
        (("runs",), {"state": "bogus"}, "state must be one of pending, running, succeeded,"),
    ],
)
async def test_bad_parameters_are_400(jp_fetch, filled_store, parts, params, message):
    code, text = await error_of(jp_fetch, *parts, **params)
    assert code == 400
    assert text.startswith(message)


async def test_unreadable_store_is_503(jp_fetch, store_file):
    store_file.parent.mkdir(parents=True)
    store_file.write_bytes(b"this is not a database" * 100)
    code, text = await error_of(jp_fetch, "clusters")
    assert code == 503
    assert "DIST_NOTEBOOK_STORE" in text or "cannot" in text


async def test_actions_of_an_owner_that_does_not_answer_are_409(jp_fetch, filled_store):
    """The cluster's kernel (this process, with no watcher) lives but takes no request:
    the server does not act behind its back, and withdraws the request."""
    for action in ("interrupt", "stop"):
        code, text = await error_of(jp_fetch, "clusters", CLUSTER, action, method="POST")
        assert code == 409
        assert f"did not take the {action} within 5 s" in text
        assert "interrupt or restart that kernel" in text
    # nothing was changed in the store
    assert (await get_json(jp_fetch, "clusters", CLUSTER))["state"] == "ready"


async def test_stopping_a_stopped_cluster_does_nothing(jp_fetch, filled_store):
    filled_store.set_cluster_state(CLUSTER, "stopped")
    response = await jp_fetch(*API, "clusters", CLUSTER, "stop", method="POST", body=b"")
    assert json.loads(response.body) == {
        "id": CLUSTER,
        "action": "stop",
        "state": "stopped",
        "via": "none",
    }
    code, text = await error_of(jp_fetch, "clusters", CLUSTER, "interrupt", method="POST")
    assert (code, text) == (409, f"cluster '{CLUSTER}' is stopped: there is nothing to interrupt")


async def test_an_unloadable_cluster_file_is_409(jp_fetch, writer, tmp_path):
    from dist_notebook.cluster.profiles import own_profile_dir

    profile = Path(own_profile_dir("bad"))
    (profile / "security").mkdir(parents=True)
    (profile / "security" / "cluster-bad.json").write_text("{not json")
    writer.add_cluster(
        "c-bad",
        n=1,
        backend="gloo",
        kernel_pid=dead_pid(),
        profile_dir=str(profile),
        ipp_cluster_id="bad",
    )
    writer.set_cluster_state("c-bad", "ready")
    code, text = await error_of(jp_fetch, "clusters", "c-bad", "stop", method="POST")
    assert code == 409
    assert text.startswith("cluster 'c-bad' cannot be reached: its cluster file")
    assert "cannot be loaded (JSONDecodeError" in text


async def test_actions_on_an_orphan_without_processes_are_409(jp_fetch, writer):
    writer.add_cluster(
        "c-gone", n=1, backend="gloo", kernel_pid=dead_pid(), profile_dir="", ipp_cluster_id=""
    )
    writer.set_cluster_state("c-gone", "ready")
    assert (await get_json(jp_fetch, "clusters", "c-gone"))["state"] == "orphaned"
    code, text = await error_of(jp_fetch, "clusters", "c-gone", "interrupt", method="POST")
    assert code == 409 and "cannot be reached" in text


async def test_delete_a_run_that_ended(jp_fetch, filled_store):
    filled_store.add_event("command", "--name warmup --steps 5", run_id=DONE)
    filled_store.add_event("output", "loss 0.1\ndone\n", run_id=DONE, rank=1)
    run = await get_json(jp_fetch, "runs", DONE)
    assert run["flags"] == "--name warmup --steps 5" and run["output"] == {"1": "loss 0.1\ndone\n"}
    response = await jp_fetch(*API, "runs", DONE, method="DELETE")
    assert json.loads(response.body) == {"id": DONE, "deleted": True}
    assert [r["id"] for r in await get_json(jp_fetch, "runs")] == [RUNNING]
    code, text = await error_of(jp_fetch, "runs", DONE)
    assert code == 404


async def test_a_running_run_is_not_deleted(jp_fetch, filled_store):
    code, text = await error_of(jp_fetch, "runs", RUNNING, method="DELETE")
    assert code == 409 and "is running: stop it first" in text


async def test_prune(jp_fetch, filled_store):
    response = await jp_fetch(*API, "runs", "prune", method="POST", body=b'{"before": 1e12}')
    assert json.loads(response.body) == {"runs": 1, "clusters": 0}  # the running one stays
    assert [r["id"] for r in await get_json(jp_fetch, "runs")] == [RUNNING]
    for body in (b"nope", b"{}", b'{"before": "soon"}'):
        code, text = await error_of(jp_fetch, "runs", "prune", method="POST", body=body)
        assert code == 400 and "before" in text
