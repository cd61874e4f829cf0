"""%dist_export on cells a script must treat apart, on the session's 2-rank gloo cluster:
a ``from __future__`` import (the script compiled only with it at the top), a pushed int
past Python's 4,300-digit limit (a raw ValueError before), top-level ``await`` (refused
with the fix, nothing written)."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TRAIN = "%%dist_train --name lows --no-dashboard\nreport(step=0, loss=float(x))\n"


def _cell(shell: Any, text: str, cell_id: str) -> None:
    result = shell.run_cell(text, store_history=True, cell_id=cell_id)
    assert result.success, (text, result.error_before_exec, result.error_in_exec)


@pytest.fixture
def fresh(shell: Any, cluster2: Any) -> Any:
    from dist_notebook.magics.history import history_of

    history_of(shell).entries.clear()
    return shell


def test_future_import_and_a_huge_int_export_to_a_script_that_compiles(
    fresh: Any, tmp_path: Path
) -> None:
    fresh.user_ns["big"] = 10**5000
    _cell(fresh, "%dist_push big\n", "push")
    _cell(
        fresh,
        "%%dist\nfrom __future__ import annotations\ndef f(a: Later) -> int:\n"
        "    return 1\nx = f(0) + big % 7\n",
        "future",
    )
    _cell(fresh, TRAIN, "train")
    target = tmp_path / "train.py"
    fresh.run_line_magic("dist_export", str(target))
    py_compile.compile(str(target), doraise=True)  # SyntaxError before: the import mid-file
    text = target.read_text()
    assert text.index("from __future__ import annotations") < text.index("import torch")
    assert "big = job.pushed('big')" in text  # pickled: repr() of it raised before
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run(
        [sys.executable, str(target)], capture_output=True, text=True, timeout=60, env=env
    )
    assert "RANK is not set" in done.stderr, done.stderr  # it runs as far as the set-up


def test_top_level_await_is_refused_and_nothing_written(fresh: Any, tmp_path: Path) -> None:
    _cell(fresh, "%%dist\nimport asyncio\nawait asyncio.sleep(0)\nx = 1\n", "await")
    _cell(fresh, TRAIN, "train")
    target = tmp_path / "train.py"
    with pytest.raises(UsageError) as info:
        fresh.run_line_magic("dist_export", str(target))
    message = str(info.value)
    assert "does not compile as a script" in message and "asyncio.run(main())" in message
    assert "\n" not in message and message.startswith("%dist_export")
    assert not target.exists()
