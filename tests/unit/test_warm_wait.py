"""The live view waits for the kernel's torch import (the cluster transfer module's warm_up
thread) before its run starts: loading libtorch holds the GIL for long stretches, and a run
started meanwhile had its first records wait in the collector's socket."""

from __future__ import annotations

import threading
import time

from dist_notebook.display.dashboard import WARM_THREAD, wait_for_warm_up


def test_waits_for_the_warm_up_thread_and_no_longer() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, args=(60,), name=WARM_THREAD, daemon=True)
    thread.start()
    try:
        waited = wait_for_warm_up(timeout=0.3)  # still importing: waits up to the bound
        assert 0.29 <= waited and thread.is_alive()
        threading.Timer(0.2, release.set).start()
        t0 = time.monotonic()
        wait_for_warm_up(timeout=30)  # returns once the import ends, not at the bound
        assert not thread.is_alive() and time.monotonic() - t0 < 25
    finally:
        release.set()
        thread.join(5)


def test_no_warm_up_thread_no_wait() -> None:
    assert wait_for_warm_up(timeout=30) < 5
