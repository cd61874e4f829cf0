"""Which collective this rank is in, told even while a cell blocks the rank.

A rank that waits in a collective its peers never call blocks its main thread in C++
(gloo or NCCL) until the group's timeout, and an ipyparallel ``apply`` to it would queue
behind the cell. The engine's kernel has a second thread, for the control channel, that
answers while a cell runs (interrupts use it): ``install()`` adds one request to it.

Each answer is cheap (well under a millisecond): the group's collective counter
(``_get_sequence_number_for_group``) and the collective the main thread is in, from
its Python stack. Once a mismatch is found, the ranks are asked once more for the ops
of their last collectives, from torch's flight recorder, which every process group of
torch 2.13 keeps (gloo and NCCL alike; ``TORCH_FR_BUFFER_SIZE`` entries, 2,000 by
default): a dump of 2,000 entries took 0.1-0.5 s on a busy 2-core machine, too much
to read at every look.

A second request shuts down this rank's connections to the group's transport from the
control thread, so a rank blocked in a mismatched collective fails at once with
"connection closed" (SIGINT cannot free it); the kernel then re-creates the group.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from functools import partial
from typing import Any

REQUEST = "dist_notebook_collectives_request"
REPLY = "dist_notebook_collectives_reply"
_C10D = os.path.join("torch", "distributed", "distributed_c10d.py")
# The calls of torch.distributed whose every rank of the group must make the same one.
COLLECTIVES = frozenset(
    """all_reduce all_reduce_coalesced all_gather all_gather_into_tensor
    all_gather_coalesced all_gather_object all_to_all all_to_all_single barrier
    monitored_barrier broadcast broadcast_object_list gather gather_object reduce
    reduce_scatter reduce_scatter_tensor scatter scatter_object_list""".split()
)


def install() -> bool:
    """Answer REQUEST on this engine's control thread; return whether there is a kernel."""
    from IPython import get_ipython

    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None:
        return False
    kernel.control_handlers[REQUEST] = partial(_answer, kernel)
    return True


def _answer(kernel: Any, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
    request = parent.get("content") or {}
    content: dict[str, Any] = {"status": "ok"}
    try:
        if request.get("sever"):
            content["closed"] = sever_here(list(request["sever"]))
        content["snapshot"] = snapshot(int(request.get("history") or 0))
    except Exception as e:  # told to the kernel, which then reports no collectives
        content["snapshot"] = {"why": f"{type(e).__name__}: {e}"}
    kernel.session.send(stream, REPLY, content=content, parent=parent, ident=ident)


def snapshot(history: int = 0) -> dict[str, Any]:
    """Where this rank is: {"seq": {group: collectives issued}, "groups": {group: global
    ranks}, "default": the default group's name, "waiting": {"op", "group", "line"} or
    None, "ops": {group: {seq: op}}}.

    "seq" is the group's own counter (``_get_sequence_number_for_group``, ~30 us).
    "waiting" says which collective the main thread is in, read from its Python stack
    (the outermost frame of ``distributed_c10d``: the call the user made). "ops" (with
    *history* > 0) gives the op of each of the last *history* collectives of every
    group from torch's flight recorder: a full dump costs 0.1-0.5 s on a busy 2-core
    machine (2,000 entries), so it is asked for only once a mismatch is found.
    """
    if "torch.distributed" not in sys.modules:
        return {"why": "torch.distributed is not imported on this rank"}
    import torch.distributed as dist

    from .. import privates

    if not dist.is_initialized():
        return {"why": "this rank has no process group"}
    names = privates.group_names()
    seq: dict[str, int] = {}
    groups: dict[str, list[int]] = {}
    for group, name in names.items():
        try:
            seq[name] = privates.sequence_number(group)
            groups[name] = [int(r) for r in dist.get_process_group_ranks(group)]
        except (RuntimeError, ValueError):  # a group being destroyed as we look
            continue
    default = names.get(privates.default_group(), "0")
    shot: dict[str, Any] = {"seq": seq, "groups": groups, "default": default}
    shot["waiting"] = _waiting(names, default)
    if history > 0:
        shot["ops"] = recorded_ops(history)
    return shot


def _waiting(names: dict[Any, str], default: str) -> dict[str, Any] | None:
    """The collective the main thread is in now, from its stack, or None."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    call = None
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith(_C10D) and code.co_name in COLLECTIVES:
            call = frame  # keep going: the outermost one is the user's own call
        frame = frame.f_back
    if call is None:
        return None
    group = call.f_locals.get("group")
    line = _user_line(call)
    return {"op": call.f_code.co_name, "group": names.get(group, default), "line": line}


def _user_line(frame: Any) -> str:
    """Where the user's code made the call: "line 4 of this cell", "line 2 of an
    earlier cell" (numbered as a rank's traceback is), or "file.py:12"."""
    frame = frame.f_back
    while frame is not None and f"{os.sep}torch{os.sep}" in frame.f_code.co_filename:
        frame = frame.f_back
    if frame is None:
        return ""
    from IPython import get_ipython

    from .. import privates

    name = frame.f_code.co_filename
    cells = privates.cell_filenames(get_ipython())
    if name in cells:
        which = "this cell" if cells[name] == max(cells.values()) else "an earlier cell"
        return f"line {frame.f_lineno} of {which}"
    return f"{name}:{frame.f_lineno}"


def recorded_ops(history: int) -> dict[str, dict[int, str]]:
    """{group: {seq: op}} of the last *history* collectives of each group, from torch's
    flight recorder (empty when the backend keeps none: TORCH_FR_BUFFER_SIZE=0)."""
    from .. import privates

    dumped = privates.flight_recorder_json()
    if dumped is None:  # a torch without a flight recorder: no ops, the numbers only
        return {}
    trace = json.loads(dumped)
    ops: dict[str, dict[int, str]] = {}
    for raw in trace.get("entries", []):  # oldest first
        if raw.get("is_p2p"):
            continue  # send/recv pair by peer, not in the group's order
        group = str((raw.get("process_group") or [""])[0])
        op = str(raw.get("profiling_name", "")).split(":")[-1]
        seq = int(raw["collective_seq_id"])
        by_seq = ops.setdefault(group, {})
        by_seq.pop(seq, None)  # the latest entry of a number last: a re-made group counts
        by_seq[seq] = op  # from 1 again under the same name, after its old numbers
    # The last *history* recorded (not the highest numbers: those may be a group's that
    # the cluster re-made since, whose entries the recorder still holds).
    return {g: dict(list(by_seq.items())[-history:]) for g, by_seq in ops.items()}


def sever_here(pair_ports: list[int]) -> int:
    """Shut down this rank's connections to the group's transport (gloo's pairs).

    Runs on the control thread while the main thread may be blocked in a collective:
    that collective then fails with "connection closed". Nothing is destroyed here;
    the main thread owns the group, and its re-creation destroys the old one.
    """
    from .group import shutdown_connections

    ports = set(pair_ports)
    return shutdown_connections(
        lambda c: bool(c.raddr) and (c.laddr.port in ports or c.raddr.port in ports)
    )
