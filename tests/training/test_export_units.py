"""The exporters' parts without a cluster: the event file format as TensorBoard reads it,
the worker's queue (never blocks the collector, bounded, one warning, flush on close),
MLflow keys and values through a real MLflow file store, and the missing-extra messages.

The targets used to test the worker are small classes of our own Target interface (we
test the queue's logic, not an integration); the formats are read back by TensorBoard's
and MLflow's own readers.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.event_pb2 import Event

from dist_notebook.export import ExportUnavailable, RunInfo, check
from dist_notebook.export.base import record_values
from dist_notebook.export.tensorboard import TensorBoardTarget, code_markdown, rank_dir_name
from dist_notebook.export.tfevents import EventFile, event, scalar_values, text_value
from dist_notebook.export.tfevents import _ScalarPrefix as ScalarPrefix
from dist_notebook.export.worker import ExportWorker
from dist_notebook.protocol import Record
from dist_notebook.training import RunSpec

INFO = RunInfo(
    run_id="0123456789ab",
    name="units",
    code="x = 1\nprint(x)",
    flags={"steps": 3},
    ranks=(0, 1),
    world_size=2,
    backend="gloo",
)


def records(steps: int, ranks: tuple[int, ...] = (0, 1)) -> list[Record]:
    return [
        Record(
            rank=r,
            step=s,
            time=1000.0 + s,
            step_time=0.5,
            comm_time=0.1,
            samples=32,
            metrics={"loss": 1.0 / (s + 1) + r},
        )
        for s in range(steps)
        for r in ranks
    ]


def accumulator(path: Path) -> EventAccumulator:
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_events_decode_with_tensorboards_own_protos() -> None:
    prefixes = ScalarPrefix()
    raw = event(12.5, -3, scalar_values([("a", 1.5), ("b/c", 1e300), ("n", math.nan)], prefixes))
    decoded = Event.FromString(raw)
    assert decoded.wall_time == 12.5 and decoded.step == -3
    values = {v.tag: v.simple_value for v in decoded.summary.value}
    assert values["a"] == 1.5
    assert values["b/c"] == math.inf  # beyond float32: infinite, not an error
    assert math.isnan(values["n"])
    text = Event.FromString(event(1.0, 7, text_value("run/code", "print('é')")))
    (value,) = text.summary.value
    assert value.metadata.plugin_data.plugin_name == "text"
    assert value.tensor.string_val == ["print('é')".encode()]
    assert Event.FromString(event(0.0, 0, version="brain.Event:2")).file_version == (
        "brain.Event:2"
    )


def test_tensorboard_reads_every_rank_as_a_sub_run(tmp_path: Path) -> None:
    target = TensorBoardTarget(INFO, tmp_path)
    location = target.start()
    target.write(records(3))
    target.finish("succeeded", None)
    run_dir = Path(location["location"])
    assert run_dir.parent == tmp_path and run_dir.name == "units-01234567"
    assert location["command"] == f"tensorboard --logdir {tmp_path}"
    for rank in (0, 1):
        acc = accumulator(run_dir / f"rank{rank}")
        loss = acc.Scalars("loss")
        assert [e.step for e in loss] == [0, 1, 2]
        assert [e.value for e in loss] == pytest.approx([1.0 + rank, 0.5 + rank, 1 / 3 + rank])
        assert [e.value for e in acc.Scalars("system/samples")] == [32, 32, 32]
        assert [e.wall_time for e in loss] == [1000.0, 1001.0, 1002.0]
    main = accumulator(run_dir)
    code = main.Tensors("run/code")[0].tensor_proto.string_val[0].decode()
    assert "print(x)" in code
    flags = main.Tensors("run/flags")[0].tensor_proto.string_val[0].decode()
    assert "| steps | 3 |" in flags and "| world_size | 2 |" in flags
    assert main.Tensors("run/state")[0].tensor_proto.string_val[0] == b"succeeded"


def test_records_without_a_step_count_per_rank(tmp_path: Path) -> None:
    target = TensorBoardTarget(INFO, tmp_path)
    run_dir = Path(target.start()["location"])
    target.write([Record(rank=1, step=None, time=1.0 + i, metrics={"m": i}) for i in range(4)])
    target.finish("succeeded", None)
    assert [e.step for e in accumulator(run_dir / "rank1").Scalars("m")] == [0, 1, 2, 3]


def test_names_and_fences() -> None:
    assert rank_dir_name(3, 2) == "rank3"
    assert rank_dir_name(3, 16) == "rank03"  # TensorBoard lists runs alphabetically
    fenced = code_markdown("s = '```'")
    assert fenced.startswith("````python\n") and fenced.endswith("\n````")
    rec = Record(rank=0, step=1, time=0.0, samples=4, metrics={"loss": 2.0}, gpu={"util": 0.5})
    assert record_values(rec) == [("loss", 2.0), ("system/samples", 4), ("system/gpu_util", 0.5)]


def test_an_event_file_is_new_for_every_writer(tmp_path: Path) -> None:
    a, b = EventFile(tmp_path), EventFile(tmp_path)
    assert a.path != b.path and "tfevents" in a.path.name
    a.close()
    b.close()


class SlowTarget:
    """A target whose write waits until the test releases it."""

    tool = "slow"

    def __init__(self, fail_on: str = "") -> None:
        self.release = threading.Event()
        self.writing = threading.Event()
        self.written: list[Record] = []
        self.finished: tuple[str, str | None] | None = None
        self.aborted = False
        self.fail_on = fail_on

    def start(self) -> dict[str, Any]:
        if self.fail_on == "start":
            raise PermissionError("read-only directory")
        return {"tool": self.tool, "location": "nowhere"}

    def write(self, recs: list[Record]) -> None:
        self.writing.set()
        assert self.release.wait(60)
        if self.fail_on == "write":
            raise OSError(28, "No space left on device")
        self.written.extend(recs)

    def flush(self) -> None:
        """Nothing buffered."""

    def finish(self, state: str, error: str | None) -> None:
        self.finished = (state, error)

    def abort(self) -> None:
        self.aborted = True

    def describe(self) -> str:
        return "slow export"

    def again(self) -> str:
        return "load_run('x').to_slow()"


def test_a_blocked_target_never_blocks_the_caller_and_the_queue_is_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    target = SlowTarget()
    located: list[dict[str, Any]] = []
    worker = ExportWorker(target, on_location=located.append, max_queued=100)
    batches = [records(1) for _ in range(80)]  # 2 records each
    worker(batches[0])
    assert target.writing.wait(30)  # the worker is now stuck in write()
    with caplog.at_level(logging.WARNING, logger="dist_notebook"):
        for batch in batches[1:]:  # returns although nothing more can be written
            worker(batch)
    assert worker.dropped == 2 * 79 - 100  # beyond 100 waiting records
    falls_behind = [r for r in caplog.records if "falls behind" in r.getMessage()]
    assert len(falls_behind) == 1
    assert "load_run('x').to_slow()" in falls_behind[0].getMessage()
    target.release.set()
    worker.close("succeeded")
    assert len(target.written) == 2 + 100
    assert target.written[:2] == batches[0]  # in the order they came
    assert target.finished == ("succeeded", None)
    assert located == [{"tool": "slow", "location": "nowhere"}]


@pytest.mark.parametrize("fail_on", ["start", "write"])
def test_a_failing_target_warns_once_and_stops(
    fail_on: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = SlowTarget(fail_on=fail_on)
    target.release.set()
    with caplog.at_level(logging.WARNING, logger="dist_notebook"):
        worker = ExportWorker(target)
        for _ in range(20):
            worker(records(2))
            time.sleep(0.01)
        worker.close("failed", "boom")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "slow export failed and is turned off" in warnings[0]
    assert "training goes on" in warnings[0] and "load_run('x').to_slow()" in warnings[0]
    assert worker.failed is not None and target.aborted and target.finished is None
    assert target.written == []


def test_mlflow_takes_any_metric_name_and_non_finite_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    from dist_notebook.export.mlflow import MlflowTarget

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    target = MlflowTarget(INFO, uri)
    location = target.start()
    names = {"acc@1": 0.5, "/abs": 1.0, "../up": 2.0, "a//b": 3.0, "nan": math.nan}
    target.write([Record(rank=0, step=5, time=10.0, metrics=names)])
    target.finish("cancelled", None)
    client = MlflowClient(uri)
    child = client.get_run(target.rank_runs[0])
    assert len(child.data.metrics) == len(names)
    assert child.data.metrics["acc_1"] == 0.5
    assert math.isnan(child.data.metrics["nan"])
    assert child.info.status == "KILLED"
    parent = client.get_run(location["run_id"])
    assert parent.data.tags["dist_notebook.state"] == "cancelled"
    assert parent.data.params["backend"] == "gloo" and parent.data.params["world_size"] == "2"


@pytest.mark.parametrize("tool", ["tensorboard", "mlflow"])
def test_a_missing_extra_names_it(tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, tool, None)  # as if it were not installed
    flag = {"tensorboard": "--tensorboard", "mlflow": "--mlflow"}[tool]
    with pytest.raises(ExportUnavailable) as err:
        check(tensorboard="tb" if tool == "tensorboard" else None, mlflow=tool == "mlflow")
    assert str(err.value) == (
        f"{flag} needs the {tool} extra ({tool} is not installed): "
        f"pip install 'dist-notebook[{tool}]'"
    )
    with pytest.raises(ExportUnavailable, match=rf"dist-notebook\[{tool}\]"):
        RunSpec(
            code="pass",
            tensorboard="tb" if tool == "tensorboard" else None,
            mlflow=tool == "mlflow",
        )
