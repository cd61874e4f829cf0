"""A batch job's recorder (batch/jobfacts.py, what rank 0 of an exported job writes)
moves its cluster and its run through the doors a notebook's go through: every move is
checked against protocol.TRANSITIONS, one it does not allow is refused and changes
nothing, and after each call memory, the run store and the REST API's answer agree.

Property-based: hypothesis draws the job's size and any sequence of the recorder's calls
(in any order, repeated), each rank's end and the run's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dist_notebook.batch.jobfacts import JobFacts
from dist_notebook.protocol import (
    ClusterState,
    IllegalMove,
    RunRankState,
    RunState,
    can_move,
)
from dist_notebook.server.manager import RunStoreManager
from dist_notebook.store import StoreReader, StoreWriter

CLUSTER, RUN = "batch-c1", "batch-r1"


def _infos(n: int) -> list[dict[str, Any]]:
    return [
        {
            "rank": r,
            "host": "node0",
            "pid": 4000 + r,
            "device": "cpu",
            "node_rank": 0,
            "state": "busy",
        }
        for r in range(n)
    ]


def _new_job(path: Path, n: int) -> tuple[JobFacts, StoreWriter]:
    writer = StoreWriter(path)
    job = JobFacts(writer, CLUSTER, RUN, n, "gloo")
    return job, writer


def _add_run(writer: StoreWriter, n: int) -> None:
    writer.add_run(RUN, name="job", cluster_id=CLUSTER, ranks=range(n), steps=None, code="")


def _memory(job: JobFacts) -> dict[str, Any]:
    return {
        "cluster": job.cluster.state.value,
        "n": job.cluster.spec.n,
        "ranks": {r.rank: r.state for r in job.cluster.ranks},
        "run": job.run.state.value,
        "run_ranks": job.run.ranks,
    }


def _sides(job: JobFacts, path: Path) -> list[dict[str, Any]]:
    """What memory, the store and the REST API say of the job's cluster and run."""
    reader = StoreReader(path)
    try:
        cluster, run = reader.cluster(CLUSTER), reader.run(RUN)
    finally:
        reader.close()
    assert cluster is not None and run is not None
    api = RunStoreManager(path)
    api_cluster, api_run = api.cluster(CLUSTER), api.run(RUN)

    def shape(c: Any, r: Any) -> dict[str, Any]:
        return {
            "cluster": c["state"],
            "n": c["n"],
            "ranks": {x["rank"]: x["state"] for x in c["ranks"]},
            "run": r["state"],
            "run_ranks": {x["rank"]: x["state"] for x in r["ranks"]},
        }

    return [_memory(job), shape(cluster, run), shape(api_cluster, api_run)]


_END = st.sampled_from(
    [RunRankState.DONE, RunRankState.FAILED, RunRankState.RELEASED, RunRankState.CANCELLED]
)
_CALL = st.one_of(
    st.just(("started",)),
    st.just(("running",)),
    st.tuples(
        st.just("ended"),
        st.sampled_from([RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED]),
        st.lists(_END, min_size=4, max_size=4),
    ),
    st.just(("stopped",)),
)


def _legal(job: JobFacts, call: tuple[Any, ...]) -> bool:
    """What the protocol allows of *call* from where the job is now."""
    cluster, run = job.cluster.state, job.run.state
    if call[0] == "started":
        return can_move(cluster, ClusterState.STARTING, ClusterState)
    if call[0] == "stopped":
        return can_move(cluster, ClusterState.STOPPING, ClusterState)
    if call[0] == "running":
        wanted = {r: RunRankState.RUNNING for r in job.run.ranks}
        state = RunState.RUNNING
    else:
        state = call[1]
        wanted = {r: call[2][r] for r in job.run.ranks}
    return can_move(run, state, RunState) and all(
        can_move(job.run.ranks[r], s, RunRankState) for r, s in wanted.items()
    )


def _call(job: JobFacts, call: tuple[Any, ...]) -> None:
    if call[0] == "started":
        job.started(_infos(job.cluster.spec.n), 0)
    elif call[0] == "running":
        job.running()
    elif call[0] == "ended":
        ends = {r: (call[2][r].value, f"rank {r} broke") for r in job.run.ranks}
        job.ended(call[1].value, "the job's error", ends)
    else:
        job.stopped()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(n=st.integers(1, 4), calls=st.lists(_CALL, min_size=1, max_size=12))
def test_every_recorder_call_is_checked_and_leaves_memory_store_and_api_equal(
    tmp_path_factory: Any, n: int, calls: list[tuple[Any, ...]]
) -> None:
    path = tmp_path_factory.mktemp("job") / "runs.sqlite"
    job, writer = _new_job(path, n)
    try:
        job.started(_infos(n), 0)
        _add_run(writer, n)
        for call in calls:
            before = _sides(job, path)
            legal = _legal(job, call)
            try:
                _call(job, call)
            except IllegalMove:
                assert not legal, call
                assert _sides(job, path) == before, call  # refused: nothing changed
            else:
                assert legal, call
            memory, store, rest = _sides(job, path)
            assert memory == store == rest, call
    finally:
        writer.close()


def test_a_jobs_life_in_the_store(tmp_path: Path) -> None:
    """Started, running, ended (rank 1 failed, rank 0 released by it), stopped: what the
    panel and %dist_runs read of the job, and no move after its end is taken."""
    path = tmp_path / "runs.sqlite"
    job, writer = _new_job(path, 2)
    try:
        job.started(_infos(2), 0)
        _add_run(writer, 2)
        job.running()
        job.ended(
            "failed",
            "rank 1: ValueError: bad batch",
            {0: ("released", "connection closed by peer"), 1: ("failed", "ValueError: bad batch")},
        )
        job.stopped()
        reader = StoreReader(path)
        try:
            cluster, run = reader.cluster(CLUSTER), reader.run(RUN)
        finally:
            reader.close()
        assert cluster is not None and run is not None
        assert (cluster["state"], cluster["backend"], cluster["n"]) == ("stopped", "gloo", 2)
        assert [(r["state"], r["engine_id"], r["host"]) for r in cluster["ranks"]] == [
            ("stopped", None, "node0"),
            ("stopped", None, "node0"),
        ]
        assert (run["state"], run["error"]) == ("failed", "rank 1: ValueError: bad batch")
        assert [(r["state"], r["error"]) for r in run["ranks"]] == [
            ("released", "connection closed by peer"),
            ("failed", "ValueError: bad batch"),
        ]
        for late in (job.running, job.stopped):
            try:
                late()
            except IllegalMove as e:
                assert "protocol.TRANSITIONS" in str(e)
            else:
                raise AssertionError(f"{late.__name__} after the job's end was taken")
        assert _sides(job, path)[1]["run"] == "failed"
    finally:
        writer.close()


def test_an_unrecorded_job_moves_in_memory_alone() -> None:
    """No store (it could not be opened): the doors still check every move."""
    job = JobFacts(None, CLUSTER, RUN, 2, "gloo")
    job.started(_infos(2), 0)
    job.running()
    job.ended("succeeded", None, {0: ("done", None), 1: ("done", None)})
    job.stopped()
    assert _memory(job) == {
        "cluster": "stopped",
        "n": 2,
        "ranks": {0: "stopped", 1: "stopped"},
        "run": "succeeded",
        "run_ranks": {0: "done", 1: "done"},
    }
