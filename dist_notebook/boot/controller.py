"""Entry point of the controller process: ``python -m dist_notebook.boot.controller``.

A parent watch (and the clean-up at the kernel's death), then ipyparallel's controller.

The controller forks 8 scheduler processes (multiprocessing, fork). Each starts its
own watch on the controller at fork, so a SIGKILL of the controller, which runs no
clean-up, leaves none of them behind.
"""

from __future__ import annotations

import os
import sys


def _remove_cluster_files() -> None:
    """After the kernel died: end our scheduler processes and remove this cluster's
    files (connection files, which hold its key, the cluster file and the logs), as a
    clean stop would have done."""
    from dist_notebook.cluster.reap import cluster_files, remove_files
    from dist_notebook.engine.parent import kill_children

    kill_children()
    profile, cluster_id = os.environ.get("IPP_PROFILE_DIR"), os.environ.get("IPP_CLUSTER_ID")
    if profile and cluster_id:
        remove_files(cluster_files(profile, cluster_id))
        # The cluster's own profile directory (cluster.own_profile_dir) goes with it.
        name, parent = os.path.basename(profile), os.path.basename(os.path.dirname(profile))
        if name.startswith("cluster-") and parent == "ipython":
            _remove_tree(profile)


def _remove_tree(path: str, within: float = 3.0) -> None:
    """Remove *path*, again while something still writes in it (a scheduler killed a
    moment ago may not have ended yet: a tree removed under it came back in CI), for at
    most *within* seconds."""
    import shutil
    import time

    deadline = time.monotonic() + within
    while True:
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path) or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def _watch_controller_in_child(controller: int) -> None:
    """In a forked scheduler: end once the controller (our parent) is gone (the OS
    kills it even when no Python thread can run; the watch where the OS cannot)."""
    from dist_notebook.engine.parent import die_with_parent, watch_pid

    die_with_parent(controller)
    watch_pid(controller)


def _clean_up_on_parent_death(parent: int) -> None:
    """SIGTERM is what the OS sends when the kernel dies (engine/parent.py): then the
    clean-up, and the end. A SIGTERM while the kernel lives is ipyparallel's stop."""
    import signal
    import types

    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: types.FrameType | None) -> None:
        if os.getppid() != parent:
            try:
                _remove_cluster_files()
            finally:
                os._exit(3)
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)


STARTUP_PINGS_S = 10.0  # seconds after the heart monitor starts with pings between beats
STARTUP_PING_MS = 50


def _register_hearts_sooner() -> None:
    """Register a new engine at its first heartbeat, not one period later.

    ipyparallel's heart monitor (a forked process of this one) learns of a new engine's
    heart when it answers a ping, and tells the hub only at the next beat: with our
    500 ms period an engine waited 0.5-1 s after it had registered before the client
    saw it (0.9 s of a 2.1 s start, measured). Here the hub is told at the answer, and
    for the first seconds of the monitor (the engines of a start arrive then) pings also
    go out every 50 ms between beats, repeating the beat's value, so a new heart needs
    no full period to be asked. Beats and missed-beat counting are unchanged.
    """
    import time

    from ipyparallel.controller.heartmonitor import HeartMonitor
    from tornado import ioloop

    original_pong = HeartMonitor.handle_pong
    original_start = HeartMonitor.start

    def handle_pong(self: HeartMonitor, msg: list) -> None:
        original_pong(self, msg)
        heart = msg[0]
        if heart in self.responses and heart not in self.hearts:
            self.handle_new_hearts({heart})

    def start(self: HeartMonitor) -> None:
        original_start(self)
        began = time.monotonic()

        def ping() -> None:
            if time.monotonic() - began > STARTUP_PINGS_S:
                pinger.stop()
                return
            self.ping_stream.send(str(self.lifetime).encode("ascii"))
            self.ping_stream.flush()

        pinger = ioloop.PeriodicCallback(ping, STARTUP_PING_MS)
        pinger.start()

    HeartMonitor.handle_pong = handle_pong  # type: ignore[method-assign]
    HeartMonitor.start = start  # type: ignore[method-assign]


def main() -> None:
    import signal

    import dist_notebook.cluster.reap  # noqa: F401 - loaded now, used at the kernel's death
    from dist_notebook.engine.parent import named_parent, watch_parent

    parent = named_parent()
    if parent is not None:
        _clean_up_on_parent_death(parent)
    watch_parent(before_exit=_remove_cluster_files, pdeath_signal=signal.SIGTERM)
    _register_hearts_sooner()
    controller = os.getpid()
    os.register_at_fork(after_in_child=lambda: _watch_controller_in_child(controller))
    from ipyparallel.controller.app import main as controller_main

    sys.argv[0] = "ipcontroller"
    controller_main()


if __name__ == "__main__":
    main()
