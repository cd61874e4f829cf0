"""The rendezvous store a rank hosts (engine/group.py), in this process: a store that is
replaced while something still holds it (a DDP model keeps its group, and so its store)
must never close a descriptor it no longer owns."""

from __future__ import annotations

import gc
import os
import socket

import pytest

from dist_notebook.engine import group

pytestmark = pytest.mark.timeout(60)


def test_a_replaced_store_closes_only_its_own_descriptor() -> None:
    group.host_store("127.0.0.1", 10)
    held = group._master_store  # as the old group of a DDP model holds it
    group.host_store("127.0.0.1", 10)  # the group re-created: a fresh store
    gc.collect()
    # Takes the lowest free descriptor: the old store's, had it been freed under it.
    bystander = socket.socket()
    try:
        fd = bystander.fileno()
        target = os.readlink(f"/proc/self/fd/{fd}")
        del held  # the DDP model goes: the old store is destroyed
        gc.collect()
        # Before the fix, the old store closed its listening descriptor a second time:
        # the bystander's (in a rank: a gloo pair or the next store's connection).
        assert os.readlink(f"/proc/self/fd/{fd}") == target
        bystander.listen(1)  # still a usable socket
    finally:
        bystander.close()
