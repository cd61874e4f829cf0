"""The README's notebook examples run as pasted: every ``python`` block, in order, in one
fresh real kernel (this interpreter's ipykernel, the extension as a user loads it, a real
2-rank CPU gloo cluster), and none may fail.

The fence language says what a block is for: ``python`` is pasted into the notebook (and
run here), ``ipython`` is a notebook cell that needs more than one machine, ``bash`` is for
a terminal, ``text`` is output. A fence without one of these fails the test, so a new
example cannot slip past it unrun.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
RUN = "python"
KNOWN = {RUN, "ipython", "bash", "text"}
CELL_TIMEOUT_S = 180  # one cell (the cluster start, a run); measured below 20 s
START_TIMEOUT_S = 60  # the kernel's start

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.DOTALL | re.MULTILINE)


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block of *text*, in order."""
    return [(m.group(1).strip(), m.group(2)) for m in _FENCE.finditer(text)]


def test_readme_starts_with_the_two_commands() -> None:
    first = blocks(README.read_text(encoding="utf-8"))[0]
    assert first[0] == "bash"
    assert [line.split()[:2] for line in first[1].splitlines()] == [
        ["make", "lab"],
        ["make", "test"],
    ]


def test_every_block_says_what_it_is_for() -> None:
    found = blocks(README.read_text(encoding="utf-8"))
    unknown = [(i, lang) for i, (lang, _) in enumerate(found) if lang not in KNOWN]
    assert not unknown, f"blocks without a known fence language {sorted(KNOWN)}: {unknown}"
    assert sum(lang == RUN for lang, _ in found) >= 4


def test_fences_are_read_as_a_reader_sees_them() -> None:
    text = "a\n```python\nx = 1\n```\n\n```text\nout\n```\n```bash\nmake\n```\n"
    assert blocks(text) == [("python", "x = 1\n"), ("text", "out\n"), ("bash", "make\n")]


def kernel_manager(spec_dir: Path) -> Any:
    """A manager starting this interpreter's ipykernel, whatever else is installed."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    kernel_dir = spec_dir / "dist-notebook-readme"
    kernel_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (kernel_dir / "kernel.json").write_text(json.dumps({"argv": argv, "language": "python"}))
    specs = KernelSpecManager(kernel_dirs=[str(spec_dir)], ensure_native_kernel=False)
    return KernelManager(kernel_name="dist-notebook-readme", kernel_spec_manager=specs)


def text_of(cell: Any) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif output.get("output_type") == "error":
            parts.append(f"{output.get('ename')}: {output.get('evalue')}")
        else:
            parts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def run_blocks(sources: list[str], labels: list[str], tmp_path: Path) -> tuple[Any, list[float]]:
    """Run *sources* as cells, in order, in one fresh real kernel with a store of its own
    and 2 gloo CPU ranks; a failing block fails the test naming its label. Returns the
    executed notebook (outputs in its cells) and each block's time. The work folder is
    ``tmp_path / "notebook"``."""
    import nbclient
    import nbformat
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    work = tmp_path / "notebook"
    work.mkdir()
    env = dict(os.environ)
    env["DIST_NOTEBOOK_STORE"] = str(tmp_path / "runs.sqlite")
    env["CUDA_VISIBLE_DEVICES"] = ""  # "one rank per GPU, else 2 CPU ranks": 2 gloo ranks
    env.pop("MPLBACKEND", None)
    km = kernel_manager(tmp_path / "kernels")
    client = nbclient.NotebookClient(
        nb,
        km=km,
        timeout=CELL_TIMEOUT_S,
        startup_timeout=START_TIMEOUT_S,
        allow_errors=False,
        resources={"metadata": {"path": str(work)}},
    )
    took: list[float] = []
    try:
        with client.setup_kernel(env=env):
            for index, cell in enumerate(nb.cells):
                started = time.perf_counter()
                try:
                    client.execute_cell(cell, index)
                except CellExecutionError as e:
                    first = cell.source.splitlines()[0]
                    pytest.fail(f"{labels[index]} ({first!r}) failed:\n{e}")
                took.append(time.perf_counter() - started)
    finally:
        if km.has_kernel:  # nbclient shuts down only the managers it made itself
            km.shutdown_kernel(now=False)
    return nb, took


def test_readme_python_blocks_run_in_order_in_a_fresh_kernel(tmp_path: Path) -> None:
    sources = [code for lang, code in blocks(README.read_text(encoding="utf-8")) if lang == RUN]
    nb, took = run_blocks(
        sources, [f"README python block {i}" for i in range(len(sources))], tmp_path
    )
    work = tmp_path / "notebook"
    print(f"\nREADME blocks: {', '.join(f'{t:.1f}' for t in took)} s; {sum(took):.1f} s in all")
    out = [text_of(cell) for cell in nb.cells]
    # What the README says each block shows.
    assert re.search(r"cluster \w+: ready in", out[0]), out[0]
    assert "[rank 0] 0 2 899" in out[1] and "[rank 1] 1 2 898" in out[1], out[1]
    assert "succeeded 400" in "".join(out), out
    assert (work / "digits.csv").stat().st_size > 0
    # the examples that moved into the docs pages: test_docs_examples.py
