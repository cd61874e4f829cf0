"""What a user reads in a real notebook kernel (jupyter_client, this interpreter's
ipykernel, a real 2-rank CPU gloo cluster):

- a dist magic used before ``%load_ext dist_notebook`` says to run it (the stand-ins of
  ``dist_notebook.load_hint``, which the package's ``etc/ipython`` kernel config loads);
- a rank's traceback names the notebook's cell number, not the engine's own count.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "jupyter-config" / "ipython" / "ipython_kernel_config.py"
REPLY_TIMEOUT_S = 120  # one cell, the cluster's start included
HINT = "run %load_ext dist_notebook first"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_the_package_installs_the_kernel_config() -> None:
    """pyproject's shared-data puts the config where IPython reads it: sys.prefix/etc/ipython
    (an editable install copies it too, once, at install time: `make venv` redoes that when
    pyproject.toml changes)."""
    shared = (
        (ROOT / "pyproject.toml").read_text().split("[tool.hatch.build.targets.wheel.shared-data]")
    )
    assert '\n"jupyter-config/ipython" = "etc/ipython"\n' in shared[1].split("\n[")[0]
    assert "dist_notebook.load_hint" in CONFIG.read_text()
    installed = Path(sys.prefix) / "etc" / "ipython" / CONFIG.name
    assert installed.is_file(), f"{installed} missing: run make venv (it reinstalls the package)"
    assert installed.read_text() == CONFIG.read_text(), f"{installed} is stale: run make venv"


class Kernel:
    """One real kernel; ``run`` executes a cell and returns (its number, text, errors)."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.kernel_spec_manager.ensure_native_kernel = True
        self.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        self.km.start_kernel(env=env, cwd=str(cwd))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str) -> tuple[int, str, list[dict[str, Any]]]:
        texts: list[str] = []
        errors: list[dict[str, Any]] = []

        def hook(msg: dict[str, Any]) -> None:
            content = msg["content"]
            if msg["msg_type"] == "stream":
                texts.append(content["text"])
            elif msg["msg_type"] == "error":
                errors.append(content)
            elif msg["msg_type"] in ("display_data", "execute_result", "update_display_data"):
                texts.append(content["data"].get("text/plain", ""))  # an update: its new text

        reply = self.kc.execute_interactive(code, timeout=REPLY_TIMEOUT_S, output_hook=hook)
        return reply["content"]["execution_count"], "".join(texts), errors

    def messages(self, code: str, interrupt_on: int | None = None) -> list[dict[str, Any]]:
        """Every iopub message of the cell; the kernel interrupted (as the notebook's Stop
        button does) once *interrupt_on* lines saying ``in place`` have come."""
        msgs: list[dict[str, Any]] = []
        sent = threading.Event()

        def hook(msg: dict[str, Any]) -> None:
            msgs.append(msg)
            if interrupt_on is None or sent.is_set():
                return
            seen = "".join(_texts(msgs)).count("in place")
            if seen >= interrupt_on:
                sent.set()
                self.km.interrupt_kernel()

        self.kc.execute_interactive(code, timeout=REPLY_TIMEOUT_S, output_hook=hook)
        assert interrupt_on is None or sent.is_set(), "the ranks never got in place"
        return msgs

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    """A kernel that reads the package's kernel config as an installed one would: from a
    profile directory of its own (``IPYTHONDIR``), so it is this checkout's file."""
    tmp = tmp_path_factory.mktemp("kernel")
    profile = tmp / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    shutil.copy(CONFIG, profile / CONFIG.name)
    env = dict(os.environ)
    env.update(IPYTHONDIR=str(tmp / "ipython"), CUDA_VISIBLE_DEVICES="")
    env["DIST_NOTEBOOK_STORE"] = str(tmp / "runs.sqlite")
    k = Kernel(env, tmp)
    yield k
    k.close()


@pytest.mark.parametrize(
    ("cell", "shown"),
    [
        ("%%dist_train --steps 3\npass", "%%dist_train"),
        ("%dist_cluster start -n 2 --cpu   # before the extension", "%dist_cluster"),
        ("%%dist\nprint(rank)", "%%dist"),
        ("x = %dist_pull rank", "%dist_pull"),
    ],
)
def test_a_magic_before_load_ext_says_to_load_it(kernel: Kernel, cell: str, shown: str) -> None:
    _, text, errors = kernel.run(cell)
    # IPython shows a UsageError as one line on stderr, not as a traceback.
    assert f"UsageError: {shown} is a dist-notebook magic" in text, (text, errors)
    assert HINT in text and "not found" not in text


def test_rank_tracebacks_name_the_notebook_cells(kernel: Kernel) -> None:
    number, text, errors = kernel.run("%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu")
    assert not errors and re.search(r"cluster \w+: ready", text), (text, errors)
    for _ in range(3):  # the notebook's count runs ahead of the engines'
        kernel.run("pass")
    kernel.run("%%dist\ndef divide(a):\n    return 1 / a\n")
    number, _, errors = kernel.run("%%dist\ny = 2\ndivide(0)\n")
    assert len(errors) == 1
    traceback = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors[0]["traceback"]))
    assert number > 5
    assert f"Cell In[{number}], line 2" in traceback, traceback
    assert "An earlier cell, line 2, in divide(a)" in traceback, traceback
    assert not re.search(r"In\[[12]\]", traceback), traceback  # the engines' own numbers


def _texts(msgs: list[dict[str, Any]]) -> list[str]:
    return [m["content"]["text"] for m in msgs if m["msg_type"] == "stream"]


def _plain(msg: dict[str, Any]) -> str:
    return str(msg["content"].get("data", {}).get("text/plain", ""))


@pytest.fixture
def ready(kernel: Kernel) -> Kernel:
    """The module's kernel with its cluster up (a start of the same spec reuses it)."""
    _, text, errors = kernel.run("%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu")
    assert not errors and "ready" in text, (text, errors)
    return kernel


def test_an_interrupt_says_one_line_and_nothing_of_the_internals(ready: Kernel) -> None:
    kernel = ready
    cell = "%%dist\nimport time\nprint('in place', rank, flush=True)\ntime.sleep(60)"
    msgs = kernel.messages(cell, interrupt_on=2)
    errors = [m["content"] for m in msgs if m["msg_type"] == "error"]
    assert len(errors) == 1, errors
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors[0]["traceback"]))
    assert shown == "interrupted ranks 0,1; cluster ready", shown
    streams = "".join(_texts(msgs))
    assert "KeyboardInterrupt" not in streams and "dist_notebook" not in streams, streams
    # Nothing of the interrupted cell leaks into the next one.
    _, text, errors = kernel.run("%%dist\nprint('next', rank)")
    assert not errors and text == "[rank 0] next 0\n[rank 1] next 1\n", (text, errors)


def test_a_group_made_again_later_reports_in_that_cell_not_the_start_cell(
    ready: Kernel,
) -> None:
    """The start (here a restart) cell's progress line is final once it is done: the
    group re-made after an interrupt freed a rank blocked in a collective says so in the
    interrupted cell."""
    kernel = ready
    restart = kernel.messages("%dist_cluster restart")
    lines = {
        m["content"]["transient"]["display_id"]
        for m in restart
        if m["msg_type"] == "display_data" and m["content"].get("transient", {}).get("display_id")
    }
    assert lines, [m["msg_type"] for m in restart]
    blocked = (
        "%%dist\nimport time, torch, torch.distributed as dist\n"
        "print('in place', rank, flush=True)\n"
        "if rank == 1:\n    time.sleep(60)\ndist.all_reduce(torch.ones(1))"
    )
    msgs = kernel.messages(blocked, interrupt_on=2)
    updates = [
        m
        for m in msgs
        if m["msg_type"] == "update_display_data"
        and m["content"].get("transient", {}).get("display_id") in lines
    ]
    assert not updates, [_plain(m) for m in updates]
    shown = [_plain(m) for m in msgs if m["msg_type"] in ("display_data", "update_display_data")]
    assert any("creating the gloo process group" in t for t in shown), shown
    _, text, errors = kernel.run("%%dist\nprint('again', rank)")
    assert not errors and text == "[rank 0] again 0\n[rank 1] again 1\n", (text, errors)
