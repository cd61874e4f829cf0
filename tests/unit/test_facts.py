"""The one door of a cluster's facts and of a run's states (cluster/facts.py,
training/states.py): every move, legal or not, leaves memory, the run store and the
REST API's answer (the server's manager over the same store) saying the same.

Property-based: hypothesis draws sequences of moves over every state of each machine,
rank moves and changes of the rank count, and after each one compares the three
sides; threads moving one cluster at once (the health thread, a scale, a stop) leave
them equal too.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dist_notebook.cluster.facts import ClusterFacts, RankInfo, from_row
from dist_notebook.cluster.spec import ClusterSpec
from dist_notebook.protocol import (
    ClusterState,
    EngineState,
    IllegalMove,
    RunRankState,
    RunState,
    can_move,
)
from dist_notebook.server.manager import RunStoreManager
from dist_notebook.store import StoreReader, StoreWriter
from dist_notebook.training.states import RunStates

CLUSTER = "c-facts"


def _ranks(n: int) -> list[RankInfo]:
    return [RankInfo(r, 10 + r, "localhost", 1000 + r, "cpu", "gloo") for r in range(n)]


def _new_facts(path: Path, n: int = 2) -> tuple[ClusterFacts, StoreWriter]:
    writer = StoreWriter(path)
    writer.add_cluster(
        CLUSTER,
        n=n,
        backend="gloo",
        kernel_pid=os.getpid(),
        profile_dir="",
        ipp_cluster_id="",
    )
    facts = ClusterFacts(CLUSTER, ClusterSpec(n=n), lambda: writer, "gloo")
    facts.move(ClusterState.STARTING, ranks=_ranks(n))
    return facts, writer


def _three_sides(facts: ClusterFacts, path: Path) -> list[dict[str, Any]]:
    """What memory, the store and the REST API say of the cluster, in one shape."""
    memory = {
        "state": facts.state.value,
        "n": facts.spec.n,
        "ranks": {r.rank: r.state for r in facts.ranks},
    }
    row = _stored_row(path)
    store = {
        "state": row["state"],
        "n": row["n"],
        "ranks": {r["rank"]: r["state"] for r in row["ranks"]},
    }
    api = RunStoreManager(path).cluster(CLUSTER)
    rest = {
        "state": api["state"],
        "n": api["n"],
        "ranks": {r["rank"]: r["state"] for r in api["ranks"]},
    }
    return [memory, store, rest]


# One step of a sequence: move the cluster, move a rank, or change the rank count.
_STEP = st.one_of(
    st.tuples(st.just("cluster"), st.sampled_from(list(ClusterState))),
    st.tuples(st.just("rank"), st.tuples(st.integers(0, 3), st.sampled_from(list(EngineState)))),
    st.tuples(st.just("scale"), st.integers(1, 4)),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(_STEP, min_size=1, max_size=25))
def test_every_move_leaves_memory_store_and_api_equal(
    tmp_path_factory: Any, steps: list[Any]
) -> None:
    path = tmp_path_factory.mktemp("facts") / "runs.sqlite"
    facts, writer = _new_facts(path)
    try:
        for kind, arg in steps:
            before = _three_sides(facts, path)[0]
            if kind == "cluster":
                legal = can_move(facts.state, arg, ClusterState)
                try:
                    facts.move(arg)
                except IllegalMove:
                    assert not legal
                    assert _three_sides(facts, path)[0] == before  # refused: nothing changed
                else:
                    assert legal and facts.state == arg
                    if arg in (ClusterState.STOPPED, ClusterState.FAILED, ClusterState.ORPHANED):
                        assert all(r.state == EngineState.STOPPED.value for r in facts.ranks)
            elif kind == "rank":
                rank, state = arg
                known = {r.rank: r.state for r in facts.ranks}
                try:
                    facts.move_rank(rank, state)
                except IllegalMove:
                    assert not can_move(known[rank], state, EngineState)
                else:
                    if rank in known:
                        assert {r.rank: r.state for r in facts.ranks}[rank] == state.value
            else:
                n = arg
                spec = dataclasses.replace(facts.spec, n=n)
                facts.update(spec=spec, ranks=_ranks(n))
                assert facts.spec.n == n and len(facts.ranks) == n
            memory, store, rest = _three_sides(facts, path)
            assert memory == store == rest, (kind, arg)
    finally:
        writer.close()


def test_after_scale_4_the_store_and_api_say_4_ranks(tmp_path: Path) -> None:
    """A scale from 2 to 4 (restarting with the new spec and rank table, then ready)."""
    path = tmp_path / "runs.sqlite"
    facts, writer = _new_facts(path)
    try:
        facts.move(ClusterState.READY)
        facts.move(ClusterState.RESTARTING)
        facts.update(spec=dataclasses.replace(facts.spec, n=4), ranks=_ranks(4))
        facts.move(ClusterState.READY)
        for side in _three_sides(facts, path):
            assert side["n"] == 4 and sorted(side["ranks"]) == [0, 1, 2, 3], side
        facts.move(ClusterState.STOPPING)
        facts.move(ClusterState.STOPPED)
        for side in _three_sides(facts, path):
            assert side["state"] == "stopped" and set(side["ranks"].values()) == {"stopped"}
    finally:
        writer.close()


def test_a_second_life_keeps_the_first_lifes_start(tmp_path: Path) -> None:
    """A start after a failure records the new life's processes in the same row: the
    row is not replaced by a fresh 'starting' one (its first start time stays)."""
    path = tmp_path / "runs.sqlite"
    facts, writer = _new_facts(path)
    try:
        facts.move(ClusterState.FAILED)
        first = StoreReader(path).cluster(CLUSTER)
        assert first is not None and first["stopped"] is not None
        facts.move(ClusterState.STARTING)
        writer.add_cluster(
            CLUSTER,
            n=2,
            backend="gloo",
            kernel_pid=os.getpid(),
            profile_dir="p2",
            ipp_cluster_id="i2",
        )
        again = StoreReader(path).cluster(CLUSTER)
        assert again is not None
        assert again["state"] == "starting" and again["started"] == first["started"]
        assert again["stopped"] is None and again["profile_dir"] == "p2"
    finally:
        writer.close()


def _race(path: Path) -> None:
    """One race of the health thread, a scale and a stop over one ready cluster."""
    facts, writer = _new_facts(path)
    facts.move(ClusterState.READY)
    go = threading.Barrier(3)
    errors: list[BaseException] = []

    def health() -> None:
        go.wait()
        for _ in range(50):
            try:
                facts.move_rank(1, EngineState.DEAD)
            except IllegalMove:  # stopped meanwhile: a stopped rank does not die again
                assert facts.state in (ClusterState.STOPPING, ClusterState.STOPPED)
            facts.move(ClusterState.DEGRADED, only_from=(ClusterState.READY,))

    def scale() -> None:
        go.wait()
        for n in (3, 4):
            live = (ClusterState.READY, ClusterState.DEGRADED)
            if not facts.move(ClusterState.RESTARTING, only_from=live):
                return
            facts.update(spec=dataclasses.replace(facts.spec, n=n), ranks=_ranks(n))
            if not facts.move(ClusterState.READY, only_from=(ClusterState.RESTARTING,)):
                return

    def stop() -> None:
        go.wait()
        live = (ClusterState.READY, ClusterState.DEGRADED, ClusterState.RESTARTING)
        if facts.move(ClusterState.STOPPING, only_from=live):
            facts.move(ClusterState.STOPPED)

    def guarded(work: Any) -> Any:
        def run() -> None:
            try:
                work()
            except BaseException as e:
                errors.append(e)

        return run

    threads = [threading.Thread(target=guarded(w)) for w in (health, scale, stop)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        assert not errors, errors
        memory, store, rest = _three_sides(facts, path)
        assert memory == store == rest
        assert memory["state"] == "stopped"
        assert set(memory["ranks"].values()) == {"stopped"}
    finally:
        writer.close()


def test_threads_moving_one_cluster_leave_both_sides_equal(tmp_path: Path) -> None:
    """The health thread (a rank dies: degraded, only from ready), a scale and a stop,
    racing: each move is checked against the state the others left, and the store
    follows memory move by move."""
    for attempt in range(20):
        _race(tmp_path / f"runs{attempt}.sqlite")


def test_a_mirror_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    facts, writer = _new_facts(path)
    try:
        facts.mirror(ClusterState.READY, _ranks(3), None)
        assert facts.state == ClusterState.READY and len(facts.ranks) == 3
        memory, store, _ = _three_sides(facts, path)
        assert store["state"] == "starting" and store["n"] == 2
    finally:
        writer.close()


def test_rank_info_changes_only_through_the_door() -> None:
    info = _ranks(1)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.state = "dead"  # type: ignore[misc]


# --- a cluster taken up from the store (the Jupyter server's, its kernel gone) ----------
def _stored_row(path: Path) -> dict[str, Any]:
    reader = StoreReader(path)
    try:
        row = reader.cluster(CLUSTER)
    finally:
        reader.close()
    assert row is not None
    return row


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(_STEP, max_size=12),
    targets=st.lists(st.sampled_from(list(ClusterState)), min_size=1, max_size=4),
)
def test_a_cluster_taken_up_from_the_store_moves_through_the_same_door(
    tmp_path_factory: Any, steps: list[Any], targets: list[ClusterState]
) -> None:
    """The owner moves the cluster anywhere (its moves drawn as above), then a process
    that only reads the store (the server) takes it up: it sees what the owner left, and
    its moves are checked from there: a stopped or failed cluster is not moved back to
    live, an illegal move is refused and writes nothing, a legal one leaves memory, store
    and REST answer equal."""
    path = tmp_path_factory.mktemp("stored") / "runs.sqlite"
    owner, writer = _new_facts(path)
    try:
        for kind, arg in steps:
            try:
                if kind == "cluster":
                    owner.move(arg)
                elif kind == "rank":
                    owner.move_rank(*arg)
                else:
                    spec = dataclasses.replace(owner.spec, n=arg)
                    owner.update(spec=spec, ranks=_ranks(arg))
            except IllegalMove:
                continue
        taken = from_row(_stored_row(path), lambda: writer)
        assert _three_sides(taken, path)[0] == _three_sides(owner, path)[0]
        for target in targets:
            before = _three_sides(taken, path)
            legal = can_move(taken.state, target, ClusterState)
            try:
                taken.move(target)
            except IllegalMove:
                assert not legal
                assert _three_sides(taken, path) == before  # refused: nothing written
            else:
                assert legal and taken.state == target
            memory, store, rest = _three_sides(taken, path)
            assert memory == store == rest, target
    finally:
        writer.close()


@pytest.mark.parametrize(
    "state", [ClusterState.READY, ClusterState.FAILED, ClusterState.ORPHANED, ClusterState.STOPPED]
)
def test_the_servers_stop_of_a_stored_cluster(tmp_path: Path, state: ClusterState) -> None:
    """What the server records after stopping a cluster whose kernel is gone: from the
    state the store holds, stopped with every rank (a dead rank too), a second stop stays
    put, and a move back to live from there is refused."""
    path = tmp_path / "runs.sqlite"
    owner, writer = _new_facts(path)
    try:
        owner.move(ClusterState.READY)
        owner.move_rank(1, EngineState.DEAD)
        owner.move(state)
        taken = from_row(_stored_row(path), lambda: writer)
        assert taken.state == state and taken.spec.n == 2
        taken.move(ClusterState.STOPPED)
        taken.move(ClusterState.STOPPED)
        for side in _three_sides(taken, path):
            assert side["state"] == "stopped" and set(side["ranks"].values()) == {"stopped"}
        again = from_row(_stored_row(path), lambda: writer)
        with pytest.raises(IllegalMove, match="stopped -> ready"):
            again.move(ClusterState.READY)
        assert _stored_row(path)["state"] == "stopped"
    finally:
        writer.close()


# --- runs -------------------------------------------------------------------------------
_RUN_STEP = st.tuples(
    st.sampled_from(list(RunState)),
    st.dictionaries(st.integers(0, 1), st.sampled_from(list(RunRankState)), max_size=2),
)


def _run_sides(states: RunStates, path: Path) -> list[dict[str, Any]]:
    reader = StoreReader(path)
    try:
        row = reader.run(states.id)
    finally:
        reader.close()
    assert row is not None
    return [
        {"state": states.state.value, "ranks": states.ranks},
        {"state": row["state"], "ranks": {r["rank"]: r["state"] for r in row["ranks"]}},
    ]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(_RUN_STEP, min_size=1, max_size=10))
def test_every_run_move_leaves_memory_and_store_equal(
    tmp_path_factory: Any, steps: list[Any]
) -> None:
    path = tmp_path_factory.mktemp("runs") / "runs.sqlite"
    writer = StoreWriter(path)
    writer.add_cluster(
        CLUSTER, n=2, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    writer.add_run("r1", name="r1", cluster_id=CLUSTER, ranks=[0, 1], steps=None, code="")
    states = RunStates("r1", [0, 1], writer)
    try:
        for state, ranks in steps:
            before = _run_sides(states, path)[0]
            legal = can_move(states.state, state, RunState) and all(
                can_move(states.ranks[r], s, RunRankState) for r, s in ranks.items()
            )
            try:
                states.move(state, ranks)
            except IllegalMove:
                assert not legal
                assert _run_sides(states, path)[0] == before
            else:
                assert legal
            memory, store = _run_sides(states, path)
            assert memory == store
    finally:
        writer.close()
