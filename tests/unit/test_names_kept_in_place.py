"""A run's name is the user's text and stays data: ``--name ../..`` cannot put a run's
checkpoints outside ``checkpoints/`` (refused with the fix), and ``%dist_runs`` shows a
name's terminal escapes and newlines escaped, never raw (the session's shell, a store of
the test's own, no cluster)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dist_notebook.training.run import RunSpec, checkpoint_folder

EVIL = "\x1b[2J\x1b[31mred\x07\nfake-row  x  succeeded"


@pytest.mark.parametrize("name", ["../..", "..", ".", "a/b", "/etc", "x\x00y", "tab\there"])
def test_a_name_that_leaves_checkpoints_is_refused(name: str) -> None:
    with pytest.raises(ValueError) as info:
        RunSpec(code="pass", name=name, checkpoint_every=1)
    message = str(info.value)
    assert f"--name {name!r} cannot name the checkpoint folder checkpoints/NAME" in message
    assert "or --checkpoint-dir DIR" in message and "\n" not in message
    with pytest.raises(ValueError):
        RunSpec(code="pass", name=name, resume=True)


def test_a_plain_name_or_a_checkpoint_dir_is_taken() -> None:
    assert checkpoint_folder("digits-v2.1") == os.path.join("checkpoints", "digits-v2.1")
    RunSpec(code="pass", name="../..", checkpoint_every=1, checkpoint_dir="elsewhere")
    RunSpec(code="pass", name="../..")  # no checkpoints: the name is only a label


def test_dist_runs_shows_escapes_escaped(
    shell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from dist_notebook.store import StoreWriter

    store = tmp_path / "runs.sqlite"
    monkeypatch.setenv("DIST_NOTEBOOK_STORE", str(store))
    writer = StoreWriter(store)
    writer.add_cluster(
        "c1", n=1, backend="gloo", kernel_pid=os.getpid(), profile_dir="", ipp_cluster_id=""
    )
    writer.add_run("r1", name=EVIL, cluster_id="c1", ranks=[0], steps=None, code="")
    writer.set_run_state("r1", "failed")
    writer.close()
    capsys.readouterr()
    shell.run_line_magic("dist_runs", "")
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    assert "\\x1b[2J\\x1b[31mred\\x07\\nfake-row" in out, out
    assert not any(line.startswith("fake-row") for line in out.splitlines())
