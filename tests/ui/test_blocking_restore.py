"""What a reloaded page's widget manager asks while a plain cell blocks, answered at once:
a real ipykernel 7 (jupyter_client) runs a cell that holds a ``CommRoute`` (as a blocking
``%%dist_train`` does) and then blocks; a second client, as a reloaded page, asks for
``kernel_info``, ``comm_info`` and every model's state through ipywidgets' control comm,
and a widget's own state. Each answer comes while the cell still blocks, from the route's
subshell; a cell queued behind the blocking one still runs after it, in order; once the
route is closed the main shell answers as before.

(With the browser tests because it is the widget front end's restore; it needs no chromium.
tests/ui/test_live_blocking_reload.py is the same in JupyterLab.)
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.timeout(180)]

BLOCK = """
import threading, ipywidgets
from dist_notebook.display.uipoll import CommRoute
slider = ipywidgets.IntSlider(value=7)
route = CommRoute(slider.comm)
release = threading.Event()
slider.on_msg(lambda _w, _content, _buffers: release.set())
print("ROUTE", route.available, route._restore is not None, flush=True)
release.wait(120)  # blocks until the slider gets a message (the test's last)
print("DIVERTED", sorted(set(route._restore.diverted)), flush=True)
route.close()
"""


@pytest.fixture
def kernel() -> Iterator[Any]:
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3")
    km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    try:
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def reply(kc: Any, msg_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        except Exception:  # queue.Empty: the loop's deadline decides
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg
    raise AssertionError(f"no reply to {msg_id} in {timeout} s")


def iopub_until(kc: Any, match: Any, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        except Exception:  # queue.Empty: the loop's deadline decides
            continue
        if match(msg):
            return msg
    raise AssertionError(f"no matching iopub message in {timeout} s")


def stream_text(msg: dict[str, Any]) -> str:
    return msg["content"].get("text", "") if msg["msg_type"] == "stream" else ""


def test_restore_requests_are_answered_while_a_cell_blocks(kernel) -> None:  # type: ignore[no-untyped-def]
    km, kc = kernel
    cell = kc.execute(BLOCK)
    started = iopub_until(kc, lambda m: "ROUTE" in stream_text(m), 60)
    assert "ROUTE True True" in stream_text(started), "ipykernel 7 subshells expected here"
    # queued behind the blocking cell: must run after it, not before
    queued = kc.execute("print('QUEUED', release.is_set(), flush=True)")

    # a reloaded page's requests; the main shell is held by the cell all along
    budget = 10.0  # loose on a loaded machine; answered in milliseconds when quiet
    info = reply(kc, kc.kernel_info(), budget)
    assert info["msg_type"] == "kernel_info_reply"
    comms = reply(kc, kc.comm_info(), budget)["content"]["comms"]
    assert len(comms) >= 3, comms  # the slider, its layout and style
    control = uuid.uuid4().hex
    kc.shell_channel.send(
        kc.session.msg(
            "comm_open",
            {"comm_id": control, "target_name": "jupyter.widget.control", "data": {}},
            metadata={"version": "1.0.0"},
        )
    )
    kc.shell_channel.send(
        kc.session.msg("comm_msg", {"comm_id": control, "data": {"method": "request_states"}})
    )
    states = iopub_until(
        kc,
        lambda m: m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == control,
        budget,
    )["content"]["data"]
    assert states["method"] == "update_states"
    assert set(comms) <= set(states["states"]), (comms, states["states"].keys())
    slider_id = next(k for k, v in states["states"].items() if v["model_name"] == "IntSliderModel")
    assert states["states"][slider_id]["state"]["value"] == 7
    # the fallback restore: each widget comm asked for its own state
    kc.shell_channel.send(
        kc.session.msg("comm_msg", {"comm_id": slider_id, "data": {"method": "request_state"}})
    )
    update = iopub_until(
        kc,
        lambda m: m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == slider_id,
        budget,
    )["content"]["data"]
    assert update["method"] == "update" and update["state"]["value"] == 7

    kc.shell_channel.send(kc.session.msg("comm_close", {"comm_id": control, "data": {}}))

    # ends the cell: a custom message to the slider, handled on the route's subshell
    kc.shell_channel.send(
        kc.session.msg(
            "comm_msg", {"comm_id": slider_id, "data": {"method": "custom", "content": {}}}
        )
    )
    assert reply(kc, cell, 60)["content"]["status"] == "ok"
    diverted = iopub_until(kc, lambda m: "DIVERTED" in stream_text(m), 5)
    for kind in ("kernel_info_request", "comm_info_request", "comm_open", "comm_msg"):
        assert kind in stream_text(diverted), stream_text(diverted)
    # the queued cell ran after the blocking one (it sees the event set), in its order
    queued_out = iopub_until(kc, lambda m: "QUEUED" in stream_text(m), 60)
    assert "QUEUED True" in stream_text(queued_out)
    assert reply(kc, queued, 30)["content"]["status"] == "ok"
    # the route closed: the main shell answers as before
    assert reply(kc, kc.kernel_info(), 30)["msg_type"] == "kernel_info_reply"
    after = kc.execute("print('AFTER', route.available, flush=True)")
    assert reply(kc, after, 30)["content"]["status"] == "ok"
