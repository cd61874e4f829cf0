"""%dist_export --ray-job's pure parts: the runtime env, the ray job submit line, and
each refusal (one line naming the fix) before any file is written."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dist_notebook.batch import rayjob
from dist_notebook.batch.script import ExportError


def engines(n: int = 2, devices: tuple[str, ...] = ("cpu", "cpu"), backend: str = "gloo"):
    return SimpleNamespace(
        pids=list(range(n)), devices=list(devices), backend=backend, spec=SimpleNamespace(n=n)
    )


def test_runtime_env_uploads_the_script_and_values_and_names_the_store(tmp_path: Path) -> None:
    job = rayjob.RayJob(
        tmp_path / "digits.py", tmp_path / "digits.values.pkl", "http://h:8265", "/s/r.db", 2
    )
    env = json.loads(job.runtime_env())
    assert env["env_vars"] == {"DIST_NOTEBOOK_STORE": "/s/r.db"}
    assert env["excludes"] == ["[!.]*", ".?*", "!/digits.py", "!/digits.values.pkl"]
    assert job.env_file == tmp_path / "digits.rayjob.yaml"


def test_excludes_leave_the_script_and_values_only_as_ray_reads_them(tmp_path: Path) -> None:
    """Ray's own walk of a working folder (gitignore patterns, as its upload does)."""
    pytest.importorskip("ray")
    from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

    for name in ("digits.py", "digits.values.pkl", "other.py", ".hidden", "data.bin"):
        (tmp_path / name).write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "digits.py").write_text("x")
    job = rayjob.RayJob(tmp_path / "digits.py", tmp_path / "digits.values.pkl", "a", "s", 2)
    excludes = json.loads(job.runtime_env())["excludes"]
    seen: list[str] = []
    _dir_travel(
        tmp_path,
        [_get_excludes(tmp_path, excludes)],
        lambda p: seen.append(str(p.relative_to(tmp_path))),
        False,
    )
    assert sorted(seen) == [".", "digits.py", "digits.values.pkl"]


def test_the_command_reserves_a_cpu_a_rank_or_the_gpus(tmp_path: Path) -> None:
    folder = tmp_path / "my runs"
    job = rayjob.RayJob(folder / "t.py", None, "http://10.0.0.1:8265", "s", 3)
    words = shlex.split(job.command())
    assert words[:3] == ["ray", "job", "submit"]
    assert words[words.index("--working-dir") + 1] == str(folder)
    assert words[words.index("--runtime-env") + 1] == str(folder / "t.rayjob.yaml")
    assert words[words.index("--entrypoint-num-cpus") + 1] == "3"
    tail = words[words.index("--") + 1 :]
    assert tail == ["torchrun", "--standalone", "--nproc-per-node", "3", "t.py"]
    gpus = rayjob.RayJob(folder / "t.py", None, "http://h:8265", "s", 4, gpus=4)
    assert "--entrypoint-num-gpus 4 --" in gpus.command()
    assert "--entrypoint-num-cpus" not in gpus.command()


def _refused(**kwargs) -> str:
    args = dict(
        path="train.py",
        engines=engines(),
        address="http://h:8265",
        nodes=None,
        gpus_per_node=None,
        procs_per_node=None,
        force=False,
    )
    args.update(kwargs)
    with pytest.raises(ExportError) as info:
        rayjob.wanted(**args)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)
    return str(info.value)


def test_refusals_name_the_fix(tmp_path: Path) -> None:
    assert "drop --nodes" in _refused(nodes=2)
    assert "letters, digits and _.+- only" in _refused(path=str(tmp_path / "my[1].py"))
    (tmp_path / "t.rayjob.yaml").write_text("mine")
    assert "exists: pass --force" in _refused(path=str(tmp_path / "t.py"))
    nccl = engines(devices=("cuda:0", "cuda:0"), backend="nccl")
    assert "give --gpus-per-node G" in _refused(engines=nccl, gpus_per_node=0)
    assert "is not a Ray job server's address" in _refused(address="http://h:8265; rm -rf")


def test_shape_from_the_notebooks_ranks(tmp_path: Path) -> None:
    path = str(tmp_path / "t.py")
    cpu = rayjob.wanted(path, engines(3, ("cpu",) * 3), "h:8265", None, None, None, False)
    assert (cpu.nproc, cpu.gpus, cpu.address) == (3, 0, "h:8265")
    gpu = engines(2, ("cuda:0", "cuda:0"), "nccl")
    on_gpus = rayjob.wanted(path, gpu, "http://h:8265/", 1, None, None, False)
    assert (on_gpus.nproc, on_gpus.gpus, on_gpus.address) == (2, 2, "http://h:8265")
    more = rayjob.wanted(path, gpu, "http://h:8265", None, 4, 8, False)
    assert (more.nproc, more.gpus) == (8, 4)


def test_no_ray_connection_and_no_address_names_address() -> None:
    """In a process that never connected to Ray."""
    code = (
        "from dist_notebook.batch import rayjob\n"
        "try:\n    rayjob.job_address(None)\n"
        "except rayjob.ExportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "--ray-job needs the Ray cluster's job server: add --address http://HEAD:8265" in (
        out.stdout
    ), out.stdout + out.stderr


def test_write_is_owner_only_and_whole(tmp_path: Path) -> None:
    want = rayjob.Wanted(tmp_path / "t.py", "http://h:8265", 2, 0)
    job = rayjob.write(want, "/store.db", None)
    assert job.env_file.stat().st_mode & 0o077 == 0
    assert json.loads(job.env_file.read_text())["excludes"][-1] == "!/t.py"
    assert [p.name for p in tmp_path.iterdir()] == ["t.rayjob.yaml"]
