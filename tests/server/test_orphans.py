"""A run whose kernel died reads as orphaned, with the reason, wherever it is read (the
REST API, %dist_runs, load_run), before anyone writes it; a stale writer cannot undo it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dist_notebook import load_run
from dist_notebook.store import StoreReader, StoreWriter

from .conftest import dead_pid

pytestmark = pytest.mark.timeout(60)


def dead_kernels_run(writer: StoreWriter) -> int:
    pid = dead_pid()
    writer.add_cluster(
        "c-dead", n=2, backend="gloo", kernel_pid=pid, profile_dir="", ipp_cluster_id=""
    )
    writer.set_cluster_state("c-dead", "ready")
    writer.add_run("r-dead", name="lost", cluster_id="c-dead", ranks=[0, 1], steps=9, code="")
    writer.set_run_state("r-dead", "running")
    return pid


async def test_rest_api_shows_orphans(jp_fetch: Any, writer: StoreWriter) -> None:
    pid = dead_kernels_run(writer)
    runs = json.loads((await jp_fetch("dist-notebook", "api", "runs")).body)
    assert [(r["id"], r["state"]) for r in runs] == [("r-dead", "orphaned")]
    assert runs[0]["error"] == f"its kernel (pid {pid}) exited before the run ended"
    run = json.loads((await jp_fetch("dist-notebook", "api", "runs", "r-dead")).body)
    assert run["state"] == "orphaned"
    by_state = json.loads(
        (await jp_fetch("dist-notebook", "api", "runs", params={"state": "running"})).body
    )
    assert by_state == []
    clusters = json.loads((await jp_fetch("dist-notebook", "api", "clusters")).body)
    assert clusters[0]["state"] == "orphaned"
    # The server wrote down what it read; the dead kernel's last view cannot undo it.
    writer.set_cluster_state("c-dead", "ready")
    writer.set_run_state("r-dead", "succeeded")
    reader = StoreReader(writer.path)
    assert reader.cluster("c-dead")["state"] == "orphaned"
    assert reader.run("r-dead")["state"] == "orphaned"
    reader.close()


def test_load_run_and_dist_runs_show_orphans(
    shell: Any, writer: StoreWriter, capsys: pytest.CaptureFixture[str]
) -> None:
    dead_kernels_run(writer)
    run = load_run("lost")
    assert run.state == "orphaned"
    shell.run_line_magic("dist_runs", "")
    out = capsys.readouterr().out
    assert "lost" in out and "orphaned" in out
