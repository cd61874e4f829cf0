"""The kernel's background torch import (the cluster transfer module's warm_up, started by
%dist_cluster start before the engines' start) and the live view's wait for it before its
run starts: loading libtorch holds the GIL for long stretches, and a run started meanwhile
had its first records wait in the collector's socket."""

from __future__ import annotations

import threading
import time

import pytest

from dist_notebook.cluster.onranks import transfer
from dist_notebook.display.dashboard import wait_for_warm_up


@pytest.fixture
def importing(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A warm-up thread that goes until the event it yields is set (the import's place)."""
    release = threading.Event()
    thread = threading.Thread(target=release.wait, args=(60,), name=transfer.WARM_THREAD)
    thread.daemon = True
    monkeypatch.setattr(transfer, "_warm", thread)
    thread.start()
    yield release
    release.set()
    thread.join(5)


def test_waits_for_the_warm_up_thread_and_no_longer(importing: threading.Event) -> None:
    waited = wait_for_warm_up(timeout=0.3)  # still importing: waits up to the bound
    assert 0.29 <= waited and transfer.warming() is not None
    threading.Timer(0.2, importing.set).start()
    t0 = time.monotonic()
    wait_for_warm_up(timeout=30)  # returns once the import ends, not at the bound
    assert transfer.warming() is None and time.monotonic() - t0 < 25


def test_no_warm_up_thread_no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "_warm", None)
    assert transfer.warming() is None
    assert wait_for_warm_up(timeout=30) < 5


def test_warm_up_imports_torch_once_in_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "_warm", None)
    thread = transfer.warm_up()
    assert transfer.warm_up() is thread and thread.name == transfer.WARM_THREAD
    thread.join(120)
    assert not thread.is_alive() and transfer.warming() is None
    import sys

    assert "torch" in sys.modules
