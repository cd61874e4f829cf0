"""An engine's registration that the kernel's client never hears of does not stall a start.

A client learns of engines from the controller's notifications, and of those registered
before it connected from its connection's reply. An engine registering in between (its
notification sent before the client's subscription took effect, which a loaded machine
makes likely) was never seen: a start in CI waited its whole timeout with 15 of 16 engines
(and 63 of 64). Here the client's first registration notification is dropped, as that race
drops it: the start still ends ready, with every rank, soon after the wait's resync.
"""

from __future__ import annotations

import time
from typing import Any

import ipyparallel as ipp
import pytest

from dist_notebook import ClusterSpec, DistCluster
from dist_notebook.cluster import ippengines

pytestmark = pytest.mark.timeout(180)


def test_a_lost_registration_notification_is_found_again(monkeypatch: pytest.MonkeyPatch) -> None:
    dropped: list[Any] = []
    register = ipp.Client._register_engine

    def lossy(self: ipp.Client, msg: Any) -> None:
        if not dropped:
            dropped.append(msg["content"]["id"])  # as if it came before the subscription
            return
        register(self, msg)

    monkeypatch.setattr(ipp.Client, "_register_engine", lossy)
    cluster = DistCluster(ClusterSpec(n=3, threads=1, start_timeout=60))
    t0 = time.monotonic()
    try:
        cluster.start_sync()
        took = time.monotonic() - t0
        assert dropped, "no registration went through the notifications: nothing was tested"
        assert [r.rank for r in cluster.ranks] == [0, 1, 2]
        assert dropped[0] in cluster.client.ids  # the resynced client knows it
        assert took < ippengines.RESYNC_S + 40, f"ready only after {took:.1f} s"
        client = cluster.require_ready()
        client[:].execute("import torch.distributed as dist; w = dist.get_world_size()", block=True)
        assert client[:].pull("w", block=True) == [3, 3, 3]
        print(f"ready {took:.1f} s after a lost registration (resync: {ippengines.RESYNC_S} s)")
    finally:
        cluster.stop_sync()
