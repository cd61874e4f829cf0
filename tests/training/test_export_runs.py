"""Runs out to TensorBoard and MLflow, on the session's real 2-rank gloo cluster.

Live (``%%dist_train --tensorboard DIR`` / ``--mlflow``) and after the fact
(``load_run(...).to_tensorboard(DIR)`` / ``.to_mlflow()``), read back with TensorBoard's
own EventAccumulator and MLflow's own client; the curves grow during a run; an export
that cannot write warns once while training goes on and the run store stays complete;
the export's location is in GET runs/<id> of a real Jupyter server; a missing extra is a
UsageError naming it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dist_notebook import load_run
from dist_notebook.export import ExportUnavailable
from dist_notebook.protocol import Record
from testbed.cells import TRAIN_CELL

from .conftest import result_of, wait_for

pytestmark = pytest.mark.slow
STEPS = 30
RANKS = (0, 1)


def accumulator(path: Path) -> EventAccumulator:
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def text(acc: EventAccumulator, tag: str) -> str:
    return str(acc.Tensors(tag)[0].tensor_proto.string_val[0].decode())


def losses(records: list[Record], rank: int) -> list[float]:
    return [r.metrics["loss"] for r in records if r.rank == rank]


def train(shell: Any, flags: str, steps: int = STEPS) -> Any:
    """Run a blocking %%dist_train cell; its RunResult."""
    magics = shell.magics_manager.registry["TrainMagics"]
    with capture_output():
        shell.run_cell_magic(
            "dist_train", f"--no-dashboard {flags}", TRAIN_CELL.format(steps=steps)
        )
    return magics.last_result


def assert_tensorboard_run(run_dir: Path, records: list[Record], state: str) -> None:
    """Every rank's sub-run holds every step's loss in order, as the store has it."""
    for rank in RANKS:
        acc = accumulator(run_dir / f"rank{rank}")
        loss = acc.Scalars("loss")
        assert [e.step for e in loss] == list(range(STEPS)), f"rank {rank}"
        assert [e.value for e in loss] == pytest.approx(losses(records, rank), rel=1e-6)
        assert [e.value for e in acc.Scalars("system/samples")] == [32.0] * STEPS
        assert {"system/step_time", "system/comm_time"} <= set(acc.Tags()["scalars"])
    main = accumulator(run_dir)
    assert "report(step=i, loss=loss, samples=32)" in text(main, "run/code")
    assert "| backend | gloo |" in text(main, "run/flags")
    assert text(main, "run/state") == state


@pytest.fixture(scope="module")
def tb_run(shell: Any, train_defined: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    logdir = tmp_path_factory.mktemp("tb")
    result = train(shell, f"--name tblive --tensorboard {logdir}")
    return result, logdir


def test_live_tensorboard_holds_steps_x_ranks_in_order(tb_run: Any) -> None:
    result, logdir = tb_run
    assert result.state.value == "succeeded"
    (run_dir,) = logdir.iterdir()
    assert run_dir.name == f"tblive-{result.run_id[:8]}"
    records = load_run(result.run_id).records()
    assert len(records) == STEPS * len(RANKS)
    assert_tensorboard_run(run_dir, records, "succeeded")
    assert f"| tensorboard | {logdir} |" in text(accumulator(run_dir), "run/flags")


def test_a_stored_run_exports_the_same_way(tb_run: Any, tmp_path: Path) -> None:
    result, _ = tb_run
    run = load_run(result.run_id)
    run_dir = run.to_tensorboard(tmp_path)
    assert run_dir == tmp_path / f"tblive-{result.run_id[:8]}"
    assert_tensorboard_run(run_dir, run.records(), "succeeded")
    with pytest.raises(FileExistsError, match="remove it, or export to another directory"):
        run.to_tensorboard(tmp_path)


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"dist_notebook.server": True}}}


async def test_the_panel_api_says_where_a_run_went(tb_run: Any, jp_fetch: Any) -> None:
    result, logdir = tb_run
    response = await jp_fetch("dist-notebook", "api", "runs", result.run_id)
    exports = json.loads(response.body)["exports"]
    assert exports[0] == {
        "tool": "tensorboard",
        "location": str(logdir / f"tblive-{result.run_id[:8]}"),
        "logdir": str(logdir),
        "command": f"tensorboard --logdir {logdir}",
        "url": None,
    }


@pytest.fixture
def tensorboard_server(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real ``tensorboard --logdir`` (as a user opens one) on an empty directory: the
    directory and the server's address. Port 0: the server picks a free one."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log_path = tmp_path / "tensorboard.log"
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)]
    cmd += ["--host", "127.0.0.1", "--port", "0", "--reload_interval", "1"]
    with log_path.open("w") as log:  # a file, not a pipe: nothing can block the server
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        found = wait_for(
            lambda: (
                re.search(r"at (http://127\.0\.0\.1:\d+)/", log_path.read_text())
                or server.poll() is not None
            ),
            120,
            "TensorBoard to serve",
            every=0.2,
        )
        assert server.poll() is None, log_path.read_text()
        yield logdir, found.group(1)
    finally:
        server.terminate()
        server.wait(timeout=30)


def served_points(address: str, run: str) -> list[int]:
    """How many loss points of each rank the TensorBoard server shows now."""
    counts = []
    for rank in RANKS:
        query = urllib.parse.urlencode({"run": f"{run}/rank{rank}", "tag": "loss"})
        try:
            with urllib.request.urlopen(f"{address}/data/plugin/scalars/scalars?{query}") as r:
                counts.append(len(json.loads(r.read())))
        except urllib.error.HTTPError:  # 400 until the server has loaded that run
            counts.append(0)
    return counts


def test_tensorboard_sees_every_ranks_curve_grow_during_the_run(
    shell: Any, trainer: Any, tensorboard_server: tuple[Path, str]
) -> None:
    tmp_path, address = tensorboard_server
    steps = 160
    with capture_output():
        shell.run_line_magic(
            "dist_train",
            f"--name tbgrow --no-dashboard --background --tensorboard {tmp_path} "
            f"train({steps}, pause=0.05)",
        )
    run = trainer.last_run
    run_dir = tmp_path / f"tbgrow-{run.id[:8]}"

    def on_disk() -> list[int]:
        if not (run_dir / "rank1").is_dir():
            return [0, 0]
        counts = []
        for rank in RANKS:
            acc = accumulator(run_dir / f"rank{rank}")
            counts.append(len(acc.Scalars("loss")) if "loss" in acc.Tags()["scalars"] else 0)
        return counts

    # Watch while the run goes on: the files (as TensorBoard's reader sees them) and a
    # real TensorBoard server (as the user sees it), each point count per rank.
    files: list[list[int]] = []
    served: list[list[int]] = []
    deadline = time.monotonic() + 120
    while run.state.value in ("pending", "running") and time.monotonic() < deadline:
        files.append(on_disk())
        served.append(served_points(address, run_dir.name))
        time.sleep(0.2)
    assert result_of(trainer, run, timeout=120).state.value == "succeeded"
    partial = [c for c in files if 0 < min(c) and max(c) < steps]
    assert len({tuple(c) for c in partial}) >= 2, f"the files did not grow during the run: {files}"
    assert any(0 < min(c) and max(c) < steps for c in served), (
        f"TensorBoard showed no partial curves during the run: {served}"
    )
    assert on_disk() == [steps, steps]
    wait_for(
        lambda: served_points(address, run_dir.name) == [steps, steps],
        60,
        "TensorBoard serving every step of both ranks",
        every=0.5,
    )


@pytest.fixture
def unwritable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A directory that cannot be written: read-only, or a disk that fills up at once.

    As root permissions do not stop a write, so root mounts a read-only (or a 12 kB)
    tmpfs there instead; a user gets the read-only case by chmod.
    """
    path = tmp_path / "export"
    path.mkdir()
    if os.geteuid() != 0:
        if request.param == "full":
            pytest.skip("a full disk is made with a small tmpfs, which needs root")
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    options = "ro,size=64k" if request.param == "read-only" else "size=12k"
    mount = ["mount", "-t", "tmpfs", "-o", options, "dist-notebook-test", str(path)]
    done = subprocess.run(mount, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to make the directory unwritable: {done.stderr}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True, timeout=30)


@pytest.mark.parametrize("unwritable", ["read-only", "full"], indirect=True)
def test_an_unwritable_export_warns_once_and_training_goes_on(
    shell: Any, train_defined: Any, unwritable: Path, caplog: pytest.LogCaptureFixture
) -> None:
    steps = 200  # about 20 kB of events a rank: more than the full disk holds
    with caplog.at_level(logging.WARNING, logger="dist_notebook"):
        result = train(shell, f"--name tbfail --tensorboard {unwritable}", steps=steps)
    assert result.state.value == "succeeded"
    warnings = [r.getMessage() for r in caplog.records if "export" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"TensorBoard export to {unwritable} failed and is turned off" in warnings[0]
    assert (
        "Read-only file system" in warnings[0]
        or "No space left" in warnings[0]
        or ("Permission denied" in warnings[0])
    )
    assert f"load_run('{result.run_id}').to_tensorboard('{unwritable}')" in warnings[0]
    records = load_run(result.run_id).records()
    for rank in RANKS:
        assert [r.step for r in records if r.rank == rank] == list(range(steps))


@pytest.fixture
def mlflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The kernel's directory, where --mlflow writes ./mlruns without MLflow settings."""
    monkeypatch.chdir(tmp_path)
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
        monkeypatch.delenv(name, raising=False)
    # Our exporter sets MLFLOW_ALLOW_FILE_STORE when it is unset: undo that afterwards.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    return tmp_path


def assert_mlflow_run(client: Any, parent_id: str, records: list[Record]) -> None:
    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    params = parent.data.params
    assert (params["world_size"], params["backend"], params["ranks"]) == ("2", "gloo", "0,1")
    assert params["mlflow"] == "True"  # the run's own flags, also after the fact
    assert parent.data.tags["dist_notebook.state"] == "succeeded"
    assert "report(step=i" in parent.data.tags["mlflow.note.content"]
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'"
    )
    by_rank = {int(c.data.params["rank"]): c for c in children}
    assert sorted(by_rank) == list(RANKS)
    for rank, child in by_rank.items():
        history = client.get_metric_history(child.info.run_id, "loss")
        assert [m.step for m in history] == list(range(STEPS))
        assert [m.value for m in history] == pytest.approx(losses(records, rank), rel=1e-9)
        samples = client.get_metric_history(child.info.run_id, "system/samples")
        assert [m.value for m in samples] == [32.0] * STEPS
        assert child.info.status == "FINISHED"


def test_mlflow_live_and_after_the_fact(shell: Any, train_defined: Any, mlflow_home: Path) -> None:
    from mlflow.tracking import MlflowClient

    result = train(shell, "--name mllive --mlflow")
    assert result.state.value == "succeeded"
    run = load_run(result.run_id)
    records = run.records()
    client = MlflowClient((mlflow_home / "mlruns").as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "dist-notebook"]
    (parent,) = client.search_runs(
        [experiment.experiment_id], f"tags.`dist_notebook.run_id` = '{result.run_id}'"
    )
    assert parent.info.run_name == "mllive"
    assert_mlflow_run(client, parent.info.run_id, records)
    again = run.to_mlflow()
    assert again != parent.info.run_id
    assert_mlflow_run(client, again, records)


def test_a_bad_tracking_uri_warns_once_and_training_goes_on(
    shell: Any,
    train_defined: Any,
    mlflow_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuch://tracking")
    with caplog.at_level(logging.WARNING, logger="dist_notebook"):
        result = train(shell, "--name mlbad --mlflow")
    assert result.state.value == "succeeded"
    warnings = [r.getMessage() for r in caplog.records if "export" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "MLflow export to nosuch://tracking failed and is turned off" in warnings[0]
    assert len(load_run(result.run_id).records()) == STEPS * len(RANKS)


@pytest.mark.parametrize(
    ("tool", "flag"), [("tensorboard", "--tensorboard tb"), ("mlflow", "--mlflow")]
)
def test_without_the_extra_the_flag_names_it(
    no_cluster: Any, monkeypatch: pytest.MonkeyPatch, tool: str, flag: str
) -> None:
    monkeypatch.setitem(sys.modules, tool, None)  # as if it were not installed
    message = rf"pip install 'dist-notebook\[{tool}\]'"
    with pytest.raises(
        UsageError, match=rf"^%%dist_train: --{tool} needs the {tool} extra.*{message}"
    ):
        no_cluster.run_cell_magic("dist_train", flag, "pass")


@pytest.mark.parametrize("tool", ["tensorboard", "mlflow"])
def test_a_stored_run_without_the_extra_names_it(
    tb_run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    monkeypatch.setitem(sys.modules, tool, None)
    run = load_run(tb_run[0].run_id)
    with pytest.raises(ExportUnavailable) as raised:
        run.to_tensorboard(tmp_path) if tool == "tensorboard" else run.to_mlflow()
    assert str(raised.value) == (
        f"to_{tool}() needs the {tool} extra ({tool} is not installed): "
        f"pip install 'dist-notebook[{tool}]'"
    )
    assert not any(tmp_path.iterdir())
