"""What our engine entry point (boot/engine.py) changes in ipyparallel's engine."""

from __future__ import annotations

from typing import Any

import psutil
import pytest

from dist_notebook.cluster.onranks.execute import run_on_ranks

pytestmark = pytest.mark.timeout(60)


def test_local_engines_have_no_nanny(cluster2: Any) -> None:
    # The nanny was a second Python process per rank, started before registration;
    # signals are answered by the engine itself (test_errors' interrupt test).
    for r in cluster2.ranks:
        children = psutil.Process(r.pid).children(recursive=True)
        assert not children, f"rank {r.rank} has child processes: {children}"


def test_cell_code_is_not_echoed_but_its_result_is_kept(cluster2: Any) -> None:
    # No execute_input on IOPub (one message per rank and cell the kernel never reads);
    # the cell still counts as a notebook cell: execution count, Out[].
    client = cluster2.client
    ar = client[cluster2.engine_ids()].execute("21 * 2", silent=False, block=False)
    ar.get(timeout=30)
    ar.wait_for_output(5)
    for md in ar._metadata:
        assert md["execute_input"] is None
        assert md["execute_result"]["data"]["text/plain"] == "42"
    outputs = run_on_ranks(cluster2, "6 * 7")
    assert [o.result["data"]["text/plain"] for o in outputs] == ["42", "42"]  # type: ignore[index]


def test_engines_start_without_the_debugger_but_can_import_debugpy(cluster2: Any) -> None:
    code = (
        "import sys\n"
        "before = 'debugpy' in sys.modules or '_pydevd_bundle' in sys.modules\n"
        "debugger = getattr(get_ipython().kernel, 'debugger', None) is not None\n"
        "import debugpy  # still importable by code on a rank\n"
        "(before, debugger, 'debugpy' in sys.modules)"
    )
    outputs = run_on_ranks(cluster2, code)
    assert [o.result["data"]["text/plain"] for o in outputs] == ["(False, False, True)"] * 2  # type: ignore[index]
