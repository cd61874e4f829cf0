"""A progress line ends with its work (a real kernel through jupyter_client, a real 2-rank
CPU gloo cluster): the start cell's line becomes the ranks table, so the cell's outputs
hold only that; after a rank's error, an interrupt and a Stop of the live view (each of
which re-makes the process group in that cell), the cell's outputs, as a notebook applies
the display messages, hold no ``[  0.0 s] ...`` line; and a later cell gets none.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .test_kernel_messages import REPLY_TIMEOUT_S, Kernel, kernel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
__all__ = ["kernel"]  # the module's kernel (its own cluster), shared

LINE = re.compile(r"^\[\s*\d+\.\d s\] ", re.M)
WIDGET = "application/vnd.jupyter.widget-view+json"


def outputs(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cell's outputs as a notebook holds them once every message is applied: a
    display with an id is updated in place by update_display_data."""
    out: list[dict[str, Any]] = []
    for m in msgs:
        kind, content = m["msg_type"], m["content"]
        display_id = content.get("transient", {}).get("display_id")
        if kind in ("display_data", "execute_result"):
            out.append({"data": content["data"], "id": display_id})
        elif kind == "stream":
            out.append({"data": {"text/plain": content["text"]}, "id": None})
        elif kind == "error":
            out.append({"data": {"text/plain": "\n".join(content["traceback"])}, "id": None})
        elif kind == "update_display_data":
            for o in out:
                if o["id"] == display_id:
                    o["data"] = content["data"]
        elif kind == "clear_output":
            out.clear()
    return out


def lines(out: list[dict[str, Any]]) -> list[str]:
    """The progress lines left in *out*."""
    return [
        str(o["data"].get("text/plain", ""))
        for o in out
        if LINE.search(str(o["data"].get("text/plain", "")))
    ]


def run_cell(
    kernel: Kernel, code: str, act: Any = None, timeout: float = REPLY_TIMEOUT_S
) -> list[dict[str, Any]]:
    """Every iopub message of *code*'s cell, up to its idle; *act(msgs)* is called after
    each one (it may send something, once)."""
    kc = kernel.kc
    msg_id = kc.execute(code)
    msgs: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except Exception:  # queue.Empty: the deadline decides
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            if msg["msg_type"] == "update_display_data":
                msgs.append(msg)  # from a thread: its display's updates count too
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return msgs
        msgs.append(msg)
        if act is not None:
            act(msgs)
    raise AssertionError(f"cell did not end in {timeout} s: {[m['msg_type'] for m in msgs]}")


def once(fn: Any) -> Any:
    done: list[bool] = []

    def act(msgs: list[dict[str, Any]]) -> None:
        if not done and fn(msgs):
            done.append(True)

    return act


def said(msgs: list[dict[str, Any]], text: str) -> int:
    return sum(m["content"].get("text", "").count(text) for m in msgs if m["msg_type"] == "stream")


@pytest.fixture(scope="module")
def started(kernel: Kernel) -> Iterator[tuple[Kernel, list[dict[str, Any]]]]:
    msgs = run_cell(kernel, "%load_ext dist_notebook\n%dist_cluster start -n 2 --cpu")
    yield kernel, msgs


def test_the_start_cell_holds_only_its_table(started) -> None:  # type: ignore[no-untyped-def]
    _kernel, msgs = started
    shown = [
        m["content"]["data"].get("text/plain", "") for m in msgs if m["msg_type"] == "display_data"
    ]
    assert any(LINE.search(t) for t in shown), shown  # the line was there, live
    out = outputs(msgs)
    assert not lines(out), out
    assert len(out) == 1 and re.search(r"cluster \w+: ready in", out[0]["data"]["text/plain"]), out


def test_the_start_line_never_reads_more_than_its_ready_time(started) -> None:  # type: ignore[no-untyped-def]
    # It once read "[ 14.3 s] creating the gloo process group" above "ready in 11.9 s".
    _kernel, msgs = started
    shown = [
        str(m["content"]["data"].get("text/plain", ""))
        for m in msgs
        if m["msg_type"] in ("display_data", "update_display_data")
    ]
    seconds = [float(x) for t in shown for x in re.findall(r"^\[\s*(\d+\.\d) s\] ", t)]
    ready = [float(x) for t in shown for x in re.findall(r": ready in (\d+\.\d+) s", t)]
    assert seconds and len(ready) == 1, shown
    assert max(seconds) <= ready[0] + 0.05, (seconds, ready)


BLOCKED = (
    "%%dist\nimport time, torch, torch.distributed as dist\n"
    "print('in place', rank, flush=True)\n"
    "{fault}\ndist.all_reduce(torch.ones(1))"
)


def test_a_rank_error_leaves_no_progress_line(started) -> None:  # type: ignore[no-untyped-def]
    kernel, _ = started
    code = BLOCKED.format(fault="if rank == 1:\n    time.sleep(0.5); raise ValueError('boom')")
    msgs = run_cell(kernel, code)
    texts = [str(m["content"].get("data", {}).get("text/plain", "")) for m in msgs]
    assert any("creating the gloo process group" in t for t in texts), texts  # re-made here
    out = outputs(msgs)
    assert not lines(out), out
    assert any("boom" in o["data"].get("text/plain", "") for o in out), out


def test_an_interrupt_leaves_no_progress_line(started) -> None:  # type: ignore[no-untyped-def]
    kernel, _ = started
    code = BLOCKED.format(fault="if rank == 1:\n    time.sleep(60)")
    act = once(lambda msgs: said(msgs, "in place") >= 2 and (kernel.km.interrupt_kernel() or True))
    msgs = run_cell(kernel, code, act)
    texts = [str(m["content"].get("data", {}).get("text/plain", "")) for m in msgs]
    assert any("creating the gloo process group" in t for t in texts), texts
    out = outputs(msgs)
    assert not lines(out), out
    assert any("interrupted ranks" in o["data"].get("text/plain", "") for o in out), out


TRAIN = """%%dist_train --name stopped --steps 5000
import time, torch, torch.distributed as dist
from dist_notebook import report
for i in range(5000):
    dist.all_reduce(torch.ones(1))
    report(step=i, loss=1.0 / (i + 1))
    time.sleep(0.02)
"""


def test_a_stop_of_the_live_view_leaves_no_progress_line(started) -> None:  # type: ignore[no-untyped-def]
    kernel, _ = started
    kc = kernel.kc

    def stop(msgs: list[dict[str, Any]]) -> bool:
        views = [
            m for m in msgs if m["msg_type"] == "display_data" and WIDGET in m["content"]["data"]
        ]
        records = [m for m in msgs if m["msg_type"] == "comm_msg"]
        if not views or len(records) < 3:
            return False  # the view exists and the run goes
        model = views[0]["content"]["data"][WIDGET]["model_id"]
        content = {"method": "custom", "content": {"kind": "stop"}}
        kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": model, "data": content}))
        return True

    msgs = run_cell(kernel, TRAIN, once(stop))
    out = outputs(msgs)
    assert not lines(out), out
    assert any("cancelled" in str(o["data"]) for o in out), out
    # a later cell gets nothing of the work before it
    later = run_cell(kernel, "print('next')")
    assert outputs(later) == [{"data": {"text/plain": "next\n"}, "id": None}], outputs(later)
