"""The contract between processes (dist_notebook/protocol.py): record, states, measures."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from dist_notebook import protocol
from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import (
    ClusterState,
    Record,
    RunRankState,
    RunState,
    can_move,
    decode_message,
    wire_message,
)
from dist_notebook.store import StoreReader, StoreWriter

ROOT = Path(__file__).resolve().parents[2]


def test_the_typescript_side_is_generated_from_this_module() -> None:
    committed = (ROOT / "extension" / "src" / "protocol.ts").read_text()
    assert committed == protocol.typescript(), (
        "extension/src/protocol.ts is out of date: run "
        "`python -m dist_notebook.protocol > extension/src/protocol.ts`"
    )


@pytest.mark.parametrize("value", [1.5, -0.0, float("nan"), math.inf, -math.inf, None])
def test_values_round_trip_through_valid_json(value: float | None) -> None:
    text = json.dumps(protocol.json_value(value), allow_nan=False)
    back = protocol.from_json_value(json.loads(text))
    assert (back is None and value is None) or (
        back is not None and value is not None and (back == value or math.isnan(back))
    )


@pytest.mark.parametrize("name", [*protocol.SYSTEM_FIELDS, "seq", "end", "run", "metrics", "v"])
def test_every_reserved_looking_name_is_an_ordinary_metric_on_the_wire(name: str) -> None:
    rec = Record(rank=1, step=3, time=10.0, step_time=0.5, metrics={name: 7.0})
    msg = json.loads(json.dumps(wire_message("r", 1, [rec.to_wire()])))
    rank, (back,), end = decode_message(msg, "r")
    assert (rank, end, back) == (1, False, rec)
    served = rec.to_json(seq=4)
    assert served["metrics"] == {name: 7.0} and served["rank"] == 1 and served["seq"] == 4


def test_the_end_of_a_rank_belongs_to_the_message() -> None:
    _, records, end = decode_message(wire_message("r", 0, [], end=True), "r")
    assert records == [] and end is True


def test_run_states_move_only_forward() -> None:
    assert can_move("pending", "running", RunState)
    assert can_move("running", "cancelled", RunState)
    for final in ("succeeded", "failed", "cancelled", "orphaned"):
        assert protocol.is_final(final, RunState)
        assert not can_move(final, "running", RunState)
    assert not can_move(RunRankState.DONE, RunRankState.FAILED, RunRankState)
    assert can_move(ClusterState.READY, ClusterState.DEGRADED, ClusterState)
    assert not can_move(ClusterState.STOPPED, ClusterState.READY, ClusterState)


def test_the_store_never_overwrites_a_final_run_state(tmp_path: Path) -> None:
    writer = StoreWriter(tmp_path / "s.sqlite")
    writer.add_run("r", name="n", cluster_id="c", ranks=[0], steps=None, code="")
    writer.set_run_state("r", "running")
    writer.set_run_state("r", "cancelled")
    writer.set_run_state("r", "failed", "a stale view")  # a late writer: ignored
    writer.set_run_rank("r", 0, "cancelled")
    writer.set_run_rank("r", 0, "done")
    reader = StoreReader(writer.path)
    row = reader.run("r")
    assert row is not None
    final = (row["state"], row["error"], row["ranks"][0]["state"])
    assert final == ("cancelled", None, "cancelled")


def _records(n: int, ranks: int = 2) -> list[Record]:
    out = []
    for i in range(n // ranks):
        for r in range(ranks):
            out.append(
                Record(
                    rank=r,
                    step=i,
                    time=1000.0 + i * 0.01,
                    step_time=0.01 if i else None,
                    # per-step values, as DDP's CPU sampling gives: rank 1 arrives 4 ms late
                    comm_time=0.002 + 0.004 * (r == 0) + 0.0001 * (i % 10),
                    samples=32,
                    metrics={"loss": 1.0 / (i + 1), "seq": 2048.0, "rank": 0.0},
                )
            )
    return out


def test_cell_and_store_give_the_same_measures_for_1e5_records(tmp_path: Path) -> None:
    """The dashboard (in memory) and the panel (from the store) show the same samples/s,
    step time and straggler for the same run: both call the protocol's code."""
    records = _records(100_000)
    live = RunMetrics([0, 1], hosts={0: "h", 1: "h"})
    t0 = time.perf_counter()
    live.add(records)
    in_memory = live.run_summary("r", "succeeded", 50_000)
    took = time.perf_counter() - t0
    writer = StoreWriter(tmp_path / "s.sqlite")
    writer.add_cluster("c", n=2, backend="gloo", kernel_pid=1, profile_dir="", ipp_cluster_id="")
    writer.set_ranks("c", [{"rank": 0, "host": "h"}, {"rank": 1, "host": "h"}])
    writer.add_run("r", name="n", cluster_id="c", ranks=[0, 1], steps=50_000, code="")
    writer.append_metrics("r", records)
    writer.set_run_state("r", "running")
    writer.set_run_state("r", "succeeded")
    stored = StoreReader(writer.path).summary("r")
    assert stored is not None
    assert stored.to_json() == in_memory.to_json()
    assert in_memory.steps_done == 50_000 and in_memory.ranks[1].straggler
    assert not in_memory.ranks[0].straggler
    assert took < 10, f"100,000 records took {took:.1f} s to add and summarise"


def test_non_finite_samples_and_losses_do_not_break_the_summary() -> None:
    m = RunMetrics([0])
    m.add(
        [
            Record(0, i, float(i), 1.0, None, math.inf if i == 2 else 4, {"loss": math.nan})
            for i in range(5)
        ]
    )
    s = m.run_summary("r", "running", None)
    assert s.ranks[0].last_loss is None and s.ranks[0].samples_per_s == pytest.approx(3 * 4 / 4)
    json.dumps(s.to_json(), allow_nan=False)


def test_gpu_samples_travel_and_are_summarised(tmp_path: Path) -> None:
    gpu = {"util": 0.93, "mem": 41.5 * 2**30, "power": 612.0}
    rec = Record(rank=0, step=1, time=5.0, step_time=0.2, samples=8, gpu=gpu)
    _, (back,), _ = decode_message(
        json.loads(json.dumps(wire_message("r", 0, [rec.to_wire()]))), "r"
    )
    assert back == rec
    writer = StoreWriter(tmp_path / "s.sqlite")
    writer.add_run("r", name="n", cluster_id="c", ranks=[0], steps=None, code="")
    writer.append_metrics("r", [rec, Record(rank=0, step=2, time=5.2, step_time=0.2)])
    reader = StoreReader(writer.path)
    assert reader.records("r")[0].gpu == gpu and reader.records("r")[1].gpu is None
    summary = reader.summary("r")
    assert summary is not None and summary.ranks[0].gpu_mem == gpu["mem"]
    assert summary.ranks[0].gpu_util == 0.93 and summary.ranks[0].gpu_power == 612.0


def test_cluster_state_changes_only_through_move() -> None:
    """No code assigns a cluster's state but DistCluster.move (which checks the table
    and records to the store) and the constructor's first NEW."""
    import ast

    offenders = []
    for path in sorted((ROOT / "dist_notebook").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                targets = node.targets if isinstance(node, ast.Assign) else []
                for target in targets:
                    if not (isinstance(target, ast.Attribute) and target.attr == "state"):
                        continue
                    text = ast.unparse(node.value)
                    if "ClusterState" in text or "type(cluster.state)" in text:
                        if func.name not in ("move", "__init__"):
                            offenders.append(f"{path.name}:{node.lineno} in {func.name}")
    assert offenders == [], offenders


def test_moves_the_code_makes_are_in_the_table() -> None:
    """The edges the cluster's own paths take (memory and store agree on each)."""
    c = protocol.ClusterState
    moves = [
        (c.NEW, c.STARTING),
        (c.STARTING, c.READY),
        (c.READY, c.RESTARTING),
        (c.RESTARTING, c.READY),
        (c.READY, c.DEGRADED),
        (c.DEGRADED, c.RESTARTING),
        (c.READY, c.FAILED),  # the controller died
        (c.NEW, c.FAILED),  # a start refused before it began
        (c.FAILED, c.STARTING),
        (c.STOPPED, c.STARTING),  # a second life, same id
        (c.READY, c.STOPPING),
        (c.STOPPING, c.STOPPED),
        (c.STARTING, c.FAILED),
    ]
    for old, new in moves:
        protocol.check_move(old, new, c, "test")
    with pytest.raises(protocol.IllegalMove, match="stopped -> ready"):
        protocol.check_move(c.STOPPED, c.READY, c, "cluster x")


def test_groupings_partition_the_states() -> None:
    assert protocol.LIVE_CLUSTER_STATES | protocol.ENDED_CLUSTER_STATES == set(
        protocol.ClusterState
    )
    assert not protocol.LIVE_CLUSTER_STATES & protocol.ENDED_CLUSTER_STATES
    assert protocol.ENDED_RUN_STATES == {
        s for s in protocol.RunState if protocol.is_final(s, protocol.RunState)
    }
