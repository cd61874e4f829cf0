"""%dist_export's refusals: each a one-line UsageError that names the fix, and no file
written. On the session's shared 2-rank gloo cluster, with a history of this test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TRAIN = "%%dist_train --name usage --no-dashboard\nreport(step=0, loss=float(x))\n"


def _cell(shell: Any, text: str, cell_id: str) -> None:
    result = shell.run_cell(text, store_history=True, cell_id=cell_id)
    assert result.success, (text, result.error_before_exec, result.error_in_exec)


@pytest.fixture
def trained(shell: Any, cluster2: Any) -> Any:
    """A history of one %%dist cell and one training, this test's only."""
    from dist_notebook.magics.history import history_of

    history_of(shell).entries.clear()
    _cell(shell, "%%dist\nx = 1\n", "setup")
    _cell(shell, TRAIN, "train")
    return shell


def _refused(shell: Any, line: str) -> str:
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("dist_export", line)
    message = str(info.value)
    assert "\n" not in message and message.startswith("%dist_export"), message
    return message


def test_no_path(trained: Any) -> None:
    assert "name the script to write, e.g. %dist_export train.py" in _refused(trained, "")


def test_not_a_python_file(trained: Any, tmp_path: Path) -> None:
    assert "must end in .py" in _refused(trained, str(tmp_path / "train.txt"))


def test_missing_folder(trained: Any, tmp_path: Path) -> None:
    message = _refused(trained, str(tmp_path / "nowhere" / "train.py"))
    assert "create it first, or name another path" in message


def test_sbatch_flags_without_sbatch(trained: Any, tmp_path: Path) -> None:
    message = _refused(trained, f"{tmp_path / 'train.py'} --nodes 2")
    assert "shape the sbatch file: add --sbatch" in message
    assert not (tmp_path / "train.py").exists()


def test_no_training_in_this_kernel(shell: Any, cluster2: Any, tmp_path: Path) -> None:
    from dist_notebook.magics.history import history_of

    history_of(shell).entries.clear()
    _cell(shell, "%%dist\nx = 1\n", "setup")
    message = _refused(shell, str(tmp_path / "train.py"))
    assert "no %%dist_train cell ran in this kernel: run the training cell" in message


def test_existing_file_needs_force(trained: Any, tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_text("mine\n")
    assert "exists: pass --force to overwrite it" in _refused(trained, str(target))
    assert target.read_text() == "mine\n"
    trained.run_line_magic("dist_export", f"{target} --force")
    assert "with job.run(name='usage'" in target.read_text()


def test_ipython_syntax_in_a_cell(trained: Any, tmp_path: Path) -> None:
    _cell(trained, "%%dist\n!true\n", "shell-escape")
    _cell(trained, TRAIN, "train")
    message = _refused(trained, str(tmp_path / "train.py"))
    assert "%%dist (In [" in message and "is not plain Python ('!true'" in message, message
    assert "rewrite that line in Python (subprocess.run for a shell command)" in message
    assert not (tmp_path / "train.py").exists()


def test_pushed_value_that_cannot_be_saved(trained: Any, tmp_path: Path) -> None:
    import threading

    trained.user_ns["cfg"] = {"scale": 2}
    _cell(trained, "%dist_push cfg\n", "push")
    _cell(trained, "%%dist\ny = cfg['scale']\n", "use")
    _cell(trained, TRAIN, "train")
    trained.user_ns["cfg"]["lock"] = threading.Lock()  # changed in place after the push
    message = _refused(trained, str(tmp_path / "train.py"))
    assert "the pushed value 'cfg' cannot be saved with the script" in message, message
    assert "make it on the ranks in a %%dist cell instead of pushing it" in message


def test_sbatch_values_sbatch_would_misread(trained: Any, tmp_path: Path) -> None:
    message = _refused(trained, f"{tmp_path / 'train.py'} --sbatch --partition 'gpu x'")
    assert "--partition 'gpu x' has characters sbatch would misread" in message


def test_sbatch_folder_with_spaces(trained: Any, tmp_path: Path) -> None:
    folder = tmp_path / "my runs"
    folder.mkdir()
    message = _refused(trained, f"'{folder / 'train.py'}' --sbatch")
    assert "export into a folder without them" in message
    assert not (folder / "train.py").exists()


def test_sbatch_of_a_multinode_gpu_job(trained: Any, tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    trained.run_line_magic(
        "dist_export",
        f"{target} --sbatch --nodes 2 --gpus-per-node 4 --partition gpu --time 2:00:00"
        " --account proj1 --name big",
    )
    text = (tmp_path / "train.sbatch").read_text()
    for line in (
        "#SBATCH --job-name=dist-notebook-big",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=2:00:00",
        "#SBATCH --account=proj1",
        f"#SBATCH --chdir={tmp_path}",
    ):
        assert line + "\n" in text, (line, text)
    assert "--nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d" in text
    assert '--rdzv-endpoint="$head:$port"' in text and "29500" not in text
    assert 's.bind(("", 0))' in text


def test_nccl_sbatch_needs_gpus(tmp_path: Path) -> None:
    from dist_notebook.batch.export import ExportError, Options, _batch
    from dist_notebook.cluster import ClusterSpec
    from dist_notebook.magics.history import Engines

    engines = Engines("c1", (1, 2), ClusterSpec(n=2), "nccl", ("cuda:0", "cuda:0"))
    with pytest.raises(ExportError, match="use nccl \\(GPUs\\): give --gpus-per-node G"):
        _batch(
            Options(str(tmp_path / "t.py"), sbatch=True),
            engines.spec,
            engines,
            "t",
            tmp_path / "t.py",
            "store",
        )


def test_script_run_without_torchrun_says_how(trained: Any, tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    trained.run_line_magic("dist_export", str(target))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run(
        [sys.executable, str(target)], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 1
    assert "RANK is not set: run this script with torchrun, e.g. torchrun --standalone" in (
        done.stderr
    ), done.stderr


def test_help_shows_every_flag_and_examples(shell: Any, capsys: Any) -> None:
    info = shell.object_inspect("%dist_export")
    doc = info["docstring"]
    for flag in ("--sbatch", "--nodes", "--gpus-per-node", "--procs-per-node", "--partition"):
        assert flag in doc, flag
    for flag in ("--time", "--account", "--name", "--force", "--help"):
        assert flag in doc, flag
    assert "examples:" in doc and "%dist_export train.py --sbatch" in doc
    shell.run_line_magic("dist_export", "--help")
    assert "usage: %dist_export" in capsys.readouterr().out


def test_a_values_file_others_can_write_is_not_loaded(trained: Any, tmp_path: Path) -> None:
    trained.user_ns["shift"] = complex(1, 2)  # not a literal: pickled beside the script
    _cell(trained, "%dist_push shift\n", "push")
    _cell(
        trained,
        "%%dist_train --name usage --no-dashboard\nreport(step=0, loss=shift.real)\n",
        "train",
    )
    target = tmp_path / "train.py"
    trained.run_line_magic("dist_export", str(target))
    values = tmp_path / "train.values.pkl"
    assert "shift = job.pushed('shift')" in target.read_text()
    values.chmod(0o666)
    from dist_notebook.batch.runtime import Job

    job = Job(0, 1, 0, 1, "cpu")
    job._values_path = values
    with pytest.raises(SystemExit, match="writable by others: not loaded"):
        job.pushed("shift")
    values.chmod(0o600)
    assert job.pushed("shift") == complex(1, 2)
