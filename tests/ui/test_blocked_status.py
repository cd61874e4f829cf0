"""What a front end reads of a kernel whose cell blocks with the live view's route open (as
a plain ``%%dist_train`` does), on a real ipykernel 7 through jupyter_client: every
message a subshell answers (a reloaded page's kernel_info, the live view's comm, a
question on a comm of its own) publishes busy then idle, and the last status a front end
sees must still be busy, with the running cell's request as parent; a comm of
``dist_notebook.running`` answers the running cell's id (what JupyterLab sent in the
request's metadata); once the cell ends, the kernel reads idle and stays so.

(With the browser tests because it is what JupyterLab's status bar follows; it needs no
chromium. tests/ui/test_status_bar.py is the same in JupyterLab.)
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from .test_blocking_restore import kernel, reply, stream_text

pytestmark = [pytest.mark.timeout(180)]
__all__ = ["kernel"]  # the fixture, shared

BLOCK = """
import threading, ipywidgets
from dist_notebook.display.uipoll import CommRoute
slider = ipywidgets.IntSlider(value=7)
route = CommRoute(slider.comm)
release = threading.Event()
slider.on_msg(lambda _w, _content, _buffers: release.set())
print("ROUTE", route.available, slider.model_id, flush=True)
release.wait(120)  # blocks until the slider gets a message (the test's last)
route.close()
"""
CELL_ID = "cell-" + uuid.uuid4().hex[:8]


class Iopub:
    """IOPub read in order, every status kept: (state, parent's type, parent's id)."""

    def __init__(self, kc: Any) -> None:
        self.kc = kc
        self.statuses: list[tuple[str, str, str]] = []

    def _next(self, timeout: float) -> dict[str, Any] | None:
        try:
            msg = self.kc.get_iopub_msg(timeout=timeout)
        except Exception:  # queue.Empty
            return None
        if msg["msg_type"] == "status":
            parent = msg["parent_header"]
            state = msg["content"]["execution_state"]
            self.statuses.append((state, parent.get("msg_type", ""), parent.get("msg_id", "")))
        return dict(msg)

    def until(self, match: Any, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._next(max(0.1, deadline - time.monotonic()))
            if msg is not None and match(msg):
                return msg
        raise AssertionError(f"no matching iopub message in {timeout} s")

    def settle(self, quiet: float = 1.0) -> list[tuple[str, str, str]]:
        """Read until nothing came for *quiet* s; the statuses so far."""
        while self._next(quiet) is not None:
            pass
        return self.statuses


def ask_running(kc: Any, iopub: Iopub, timeout: float) -> dict[str, Any]:
    """Open a comm of dist_notebook.running (as the labextension does); its answer."""
    comm_id = uuid.uuid4().hex
    kc.shell_channel.send(
        kc.session.msg(
            "comm_open",
            {"comm_id": comm_id, "target_name": "dist_notebook.running", "data": {}},
        )
    )
    answer = iopub.until(
        lambda m: (
            m["msg_type"] in ("comm_msg", "comm_close") and m["content"]["comm_id"] == comm_id
        ),
        timeout,
    )
    return dict(answer["content"].get("data") or {}, kind=answer["msg_type"])


def test_the_kernel_reads_busy_while_a_cell_blocks_and_says_which_cell(kernel) -> None:  # type: ignore[no-untyped-def]
    _km, kc = kernel
    request = kc.session.msg(
        "execute_request",
        {"code": BLOCK, "silent": False, "store_history": True, "allow_stdin": False},
        metadata={"cellId": CELL_ID},
    )
    kc.shell_channel.send(request)
    cell = request["header"]["msg_id"]
    iopub = Iopub(kc)
    started = iopub.until(lambda m: "ROUTE" in stream_text(m), 60)
    assert "ROUTE True" in stream_text(started), "ipykernel 7 subshells expected here"

    budget = 10.0  # loose on a loaded machine; answered in milliseconds when quiet
    for _ in range(3):  # a reloaded page's requests, answered by the route's subshell
        assert reply(kc, kc.kernel_info(), budget)["msg_type"] == "kernel_info_reply"
    answer = ask_running(kc, iopub, budget)
    assert answer == {"kind": "comm_msg", "cell_id": CELL_ID, "msg_id": cell}, answer
    seen = iopub.settle()
    # each kernel_info's idle is there (its request is done only then), and followed by
    # the cell's busy: the last status any front end saw is the running cell's busy
    assert ("idle", "kernel_info_request") in [(s, t) for s, t, _ in seen], seen
    assert seen[-1] == ("busy", "execute_request", cell), seen
    after_idle = [seen[i + 1] for i, s in enumerate(seen[:-1]) if s[0] == "idle"]
    assert all(s == ("busy", "execute_request", cell) for s in after_idle), seen

    # the slider's message ends the cell: then idle, with no busy after it
    slider_id = stream_text(started).split()[2]
    kc.shell_channel.send(
        kc.session.msg(
            "comm_msg", {"comm_id": slider_id, "data": {"method": "custom", "content": {}}}
        )
    )
    assert reply(kc, cell, 60)["content"]["status"] == "ok"
    time.sleep(0.5)
    assert reply(kc, kc.kernel_info(), budget)["msg_type"] == "kernel_info_reply"
    ended = iopub.settle()
    assert ("idle", "execute_request", cell) in ended, ended
    assert ended[-1][0] == "idle", ended
    last_cell_idle = max(i for i, s in enumerate(ended) if s == ("idle", "execute_request", cell))
    assert ("busy", "execute_request", cell) not in ended[last_cell_idle:], ended
    # and nobody answers which cell runs (the target is gone: the comm is closed at once)
    assert ask_running(kc, iopub, budget)["kind"] == "comm_close"
