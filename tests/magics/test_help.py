"""Help where users look: ``%magic?`` shows every flag with examples, ``--help`` prints
it (not an error), tab completion offers subcommands and flags; ``%dist_runs`` lists,
deletes and prunes the run history, and says what is wrong when it cannot."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.completer import provisionalcompleter
from IPython.core.error import UsageError

from dist_notebook.store import StoreReader, StoreWriter

pytestmark = pytest.mark.timeout(60)

# Every flag of each magic, as a user would look for it in the help.
FLAGS = {
    "dist_cluster": ["-n", "--gpus", "--cpu", "--backend", "--timeout", "--threads", "--ip"]
    + ["--launcher", "--auto-restart", "--all", "--hosts", "--nodes", "--gpus-per-node"],
    "dist": ["--ranks", "--no-stream", "--timeout"],
    "dist_train": ["--name", "--steps", "--ranks", "--no-dashboard", "--background"]
    + ["--timeout", "--checkpoint-every", "--checkpoint-dir", "--resume"],
    "dist_runs": ["--state", "--delete", "--prune-before"],
}


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_question_mark_shows_every_flag_and_examples(shell: Any, name: str) -> None:
    kind = "cell" if name == "dist" else "line"
    info = shell.object_inspect(("%%" if kind == "cell" else "%") + name)
    doc = info["docstring"]
    assert info["found"] and "See ``" not in doc
    for flag in [*FLAGS[name], "--help"]:
        assert flag in doc, f"{flag} missing from %{name}?"
    assert "examples:" in doc and f"%{name} " in doc.split("examples:")[1]


@pytest.mark.parametrize(
    ("kind", "name"),
    [("line", "dist_cluster"), ("cell", "dist"), ("cell", "dist_train"), ("line", "dist_runs")]
    + [("line", "dist_pull"), ("line", "dist_train")],
)
def test_help_flag_prints_help(
    no_cluster: Any, capsys: pytest.CaptureFixture[str], kind: str, name: str
) -> None:
    # No cluster runs: --help answers before anything needs one.
    if kind == "cell":
        no_cluster.run_cell_magic(name, "--help", "print(1)")
    else:
        no_cluster.run_line_magic(name, "--help")
    out = capsys.readouterr().out
    assert "usage: %" in out and "show this help" in out and "examples:" in out


def completions(shell: Any, line: str) -> list[str]:
    with provisionalcompleter():
        return [c.text for c in shell.Completer.completions(line, len(line))]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("%dist_cluster st", {"start", "status", "stop", "stacks"}),
        ("%dist_cluster start --gp", {"--gpus", "--gpus-per-node"}),
        ("%%dist --no", {"--no-stream"}),
        ("%%dist_train --checkpoint-e", {"--checkpoint-every"}),
        ("%dist_runs --pru", {"--prune-before"}),
    ],
)
def test_tab_completion(shell: Any, line: str, expected: set[str]) -> None:
    found = set(completions(shell, line))
    assert expected <= found, found


def test_status_of_a_cluster_that_never_started(
    no_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failed start leaves a cluster without ranks: status shows its state, no crash."""
    from dist_notebook.cluster import ClusterSpec, ClusterState, DistCluster
    from dist_notebook.magics.session import Session

    cluster = DistCluster(ClusterSpec(n=2))
    cluster.move(ClusterState.FAILED)  # a start refused before it began
    Session.for_shell(no_cluster).cluster = cluster
    no_cluster.run_line_magic("dist_cluster", "status")
    assert "failed" in capsys.readouterr().out


# --- %dist_runs -------------------------------------------------------------------------


@pytest.fixture
def own_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "runs.sqlite"
    monkeypatch.setenv("DIST_NOTEBOOK_STORE", str(path))
    yield path


def fill(path: Path, runs: list[tuple[str, str, str, float]]) -> None:
    """(id, name, state, started) runs on one stopped cluster."""
    writer = StoreWriter(path)
    writer.add_cluster("c1", n=2, backend="gloo", kernel_pid=0, profile_dir="", ipp_cluster_id="")
    for run_id, name, state, started in runs:
        writer.add_run(run_id, name=name, cluster_id="c1", ranks=[0, 1], steps=None, code="")
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:  # an old run's start
            conn.execute("UPDATE runs SET started = ? WHERE id = ?", (started, run_id))
        writer.set_run_state(run_id, "running")
        writer.set_run_state(run_id, state)
    writer.set_cluster_state("c1", "ready")
    writer.set_cluster_state("c1", "stopped")
    writer.close()


def test_runs_on_an_empty_store(
    shell: Any, own_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("dist_runs", "")
    assert "no runs yet" in capsys.readouterr().out
    StoreWriter(own_store).close()  # a store file with no runs in it
    shell.run_line_magic("dist_runs", "")
    assert "no runs yet" in capsys.readouterr().out


def test_delete_by_name_and_by_id(
    shell: Any, own_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    fill(
        own_store,
        [("a1", "a", "succeeded", now), ("a2", "a", "failed", now), ("b1", "b", "cancelled", now)],
    )
    shell.run_line_magic("dist_runs", "--delete a")
    assert "deleted 2 runs named a" in capsys.readouterr().out
    shell.run_line_magic("dist_runs", "--delete b1")
    reader = StoreReader(own_store)
    assert reader.runs() == [] and reader.metrics("a1") == []
    reader.close()


def test_prune_before_a_date(
    shell: Any, own_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = time.mktime(time.strptime("2026-01-10", "%Y-%m-%d"))
    fill(own_store, [("old", "x", "succeeded", old), ("new", "y", "succeeded", time.time())])
    shell.run_line_magic("dist_runs", "--prune-before 2026-02-01")
    assert "deleted 1 run(s)" in capsys.readouterr().out
    reader = StoreReader(own_store)
    assert [r["id"] for r in reader.runs()] == ["new"]
    assert reader.cluster("c1") is not None  # it still has a run
    reader.close()
    shell.run_line_magic("dist_runs", "--prune-before 2999-01-01")
    reader = StoreReader(own_store)
    assert reader.runs() == [] and reader.clusters() == []
    reader.close()


@pytest.mark.parametrize(
    ("line", "fix"),
    [
        ("--delete nope", "no run named 'nope'; %dist_runs lists them"),
        ("--delete live", "is running: stop it first"),
        ("--prune-before yesterday", "is not a date; write it like 2026-11-01"),
        ("--delete a --prune-before 2026-01-01", "give --delete or --prune-before, not both"),
        ("--state done", "argument --state: invalid choice: 'done'"),
    ],
)
def test_runs_usage_errors(shell: Any, own_store: Path, line: str, fix: str) -> None:
    fill(own_store, [("r1", "a", "succeeded", time.time())])
    writer = StoreWriter(own_store)
    writer.add_cluster("c2", n=1, backend="gloo", kernel_pid=0, profile_dir="", ipp_cluster_id="")
    writer.add_run("r2", name="live", cluster_id="c2", ranks=[0], steps=None, code="")
    writer.set_run_state("r2", "running")
    writer.close()
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("dist_runs", line)
    assert fix in str(info.value)


# Flags that do something rather than set something: there is no default to give.
COMMANDS = {
    ("%dist_runs", "--delete"),
    ("%dist_runs", "--prune-before"),
    ("%dist_pull", "expression"),
}


@pytest.mark.parametrize("name", sorted(FLAGS) + ["dist_pull"])
def test_every_flag_gives_its_default(shell: Any, name: str) -> None:
    import argparse

    magic = shell.find_magic(name, "line") or shell.find_magic(name, "cell")
    parser = magic.parser
    helpless = []
    for action in parser._actions:
        if isinstance(action, (argparse._StoreTrueAction, argparse._HelpAction)):
            continue  # an on/off flag is off unless given
        label = action.option_strings[-1] if action.option_strings else action.dest
        if (parser.prog, label) in COMMANDS:
            continue
        formatter = parser._get_formatter()
        if "default" not in formatter._expand_help(action):
            helpless.append(label)
    assert not helpless, f"{parser.prog}: no default in the help of {helpless}"


def test_timeout_help_says_30_seconds(shell: Any) -> None:
    doc = shell.object_inspect("%dist_cluster")["docstring"]
    assert "collective timeout in seconds (default: 30)" in " ".join(doc.split())
