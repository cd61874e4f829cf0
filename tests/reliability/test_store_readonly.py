"""A run store in a read-only directory never stops a cluster: start, train and stop
work (warned once, nothing recorded), and an existing store there is still read."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dist_notebook.store import StoreWriter

from .isolated import run_isolated

pytestmark = pytest.mark.timeout(200)

SCRIPT = textwrap.dedent(
    """
    import os
    from IPython.testing.globalipapp import start_ipython
    import dist_notebook

    ip = start_ipython()
    ip.run_line_magic("load_ext", "dist_notebook")
    ip.run_line_magic("dist_runs", "")            # the existing store, read-only
    print("LOADED", dist_notebook.load_run("archived").state, flush=True)
    os.environ["DIST_NOTEBOOK_STORE"] = os.environ["NEW_STORE"]  # cannot be created
    ip.run_line_magic("dist_cluster", "start -n 2 --cpu")
    result = ip.run_cell(
        "%%dist_train --name ro --no-dashboard\\n"
        "for s in range(3):\\n    report(step=s, loss=1.0)\\n"
    )
    assert result.error_in_exec is None, result.error_in_exec
    last = ip.magics_manager.registry["TrainMagics"].last_result
    print("RUN", last.state.value, last.records, flush=True)
    ip.run_line_magic("dist_cluster", "stop")
    print("STOPPED", flush=True)
    os.environ["DIST_NOTEBOOK_STORE"] = os.environ["OLD_STORE"]  # exists, read-only
    ip.run_line_magic("dist_cluster", "start -n 2 --cpu")
    ip.run_line_magic("dist_cluster", "stop")
    print("STOPPED AGAIN", flush=True)
    """
)


def test_read_only_store_directory(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    old = shelf / "runs.sqlite"
    writer = StoreWriter(old)
    writer.add_cluster("c0", n=2, backend="gloo", kernel_pid=0, profile_dir="", ipp_cluster_id="")
    writer.add_run("r0", name="archived", cluster_id="c0", ranks=[0, 1], steps=3, code="pass")
    writer.set_run_state("r0", "running")
    writer.set_run_state("r0", "succeeded")
    writer.close()
    proc = run_isolated(
        SCRIPT,
        read_only=[shelf],
        env={
            "DIST_NOTEBOOK_STORE": str(old),
            "OLD_STORE": str(old),
            "NEW_STORE": str(shelf / "new" / "runs.sqlite"),
        },
    )
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, f"{out}\n{err}"
    assert "archived" in out and "LOADED succeeded" in out
    assert "RUN succeeded 6" in out and "STOPPED" in out and "STOPPED AGAIN" in out
    assert "Errno 30" not in err and "Traceback" not in err, err
    # Said once per store and part that uses it (records; the panel's controls), with
    # the remedy; not once per write (it was 3-4 times a cell).
    warnings = [line for line in err.splitlines() if "DIST_NOTEBOOK_STORE to a" in line]
    assert len(warnings) == len(set(warnings)), err
    created = [w for w in warnings if "cannot create the run store" in w]
    read_only = [w for w in warnings if "is read-only" in w]
    assert 1 <= len(created) <= 2 and 1 <= len(read_only) <= 2, err
    assert len(warnings) == len(created) + len(read_only), err
