"""Entry point of an engine process: ``python -m dist_notebook.boot.engine [ipengine args]``.

Sets the rank environment before anything imports torch, starts watching the parent,
starts importing torch in the background (about 2 s that would otherwise fall on the
first cell), then hands over to ipyparallel's engine.

Local engines run without ipyparallel's nanny (a second Python process per engine,
~0.4 CPU-s to start, waited for before the engine registers): the engine answers the
client's ``signal_request`` itself, on its control thread, which runs while a cell
blocks the main thread. The nanny's other duty, telling the controller at once that
its engine died, is the launcher's for local engines (the kernel watches their exits).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from .. import envvars


def _preimport() -> None:
    # Runs while the engine registers with the controller; the first process-group
    # creation then finds torch already imported.
    import torch.distributed  # noqa: F401

    # From here on every DDP model of the rank is watched, wherever it is built (a
    # %%dist cell before a run, a checkpoint unpickled): its comm time (engine/commtime.py).
    from ..engine.commtime import watch_new_models

    watch_new_models()


def _answer_signals() -> None:
    """Let the engine's kernel answer ``signal_request`` (``Client.send_signal``, which
    ``DistCluster.interrupt`` uses) as the nanny would: signal this process."""
    import signal

    from ipyparallel import error
    from ipyparallel.engine.kernel import IPythonParallelKernel

    def signal_request(
        self: IPythonParallelKernel, stream: object, ident: object, parent: dict
    ) -> None:
        sig = parent["content"].get("sig")
        try:
            os.kill(os.getpid(), getattr(signal, sig) if isinstance(sig, str) else int(sig))
            content: dict = {"status": "ok"}
        except Exception:  # a bad signal name or number: the error goes back to the client
            content = error.wrap_exception()
        self.session.send(stream, "signal_reply", content=content, parent=parent, ident=ident)

    kernel: Any = IPythonParallelKernel
    kernel.signal_request = signal_request
    if "signal_request" not in kernel.control_msg_types:
        kernel.control_msg_types = [*kernel.control_msg_types, "signal_request"]


def _no_execute_input() -> None:
    """Do not echo each cell's code on IOPub (``execute_input``).

    A notebook kernel echoes the code for its other front ends; an engine's only reader
    is the kernel that sent the code, which neither needs nor reads it. The echo was one
    more message per rank per cell through the controller's IOPub relay: it made a
    ``silent=False`` execute (what %%dist sends, for the execution count, the Out[] and
    the post-execute hooks) 1.18x a silent one; without it 1.04x (2 ranks).
    """
    from .. import privates

    privates.silence_execute_input()


def _top_level_await() -> None:
    """A cell's top-level ``await`` runs on the rank (engine/awaiting.py): without it
    such a cell never returned."""
    from ..engine.awaiting import LOOP_RUNNER

    sys.argv.append(f"--InteractiveShell.loop_runner={LOOP_RUNNER}")


def _no_debugger() -> None:
    """Start the engine's kernel without ipykernel's debugger.

    ipykernel loads debugpy and its vendored pydevd (~100 modules, 0.15-0.6 CPU-s a
    rank on a 2-core machine) for a notebook's Debug panel, which cannot reach an engine
    through ipyparallel. Its check runs once, when ``ipykernel.debugger`` is imported: it
    is imported here with debugpy hidden, then debugpy is visible again, so code on a
    rank can still ``import debugpy`` (``debugpy.listen()`` to attach an IDE).
    """
    hidden = "debugpy" not in sys.modules
    if hidden:
        sys.modules["debugpy"] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        import ipykernel.debugger  # noqa: F401
    finally:
        if hidden:
            del sys.modules["debugpy"]


def _after_kernel_died() -> None:
    """End our nanny if we have one (it would wait 3 s to tell a dead controller) and
    remove the cluster's stack folder, which the kernel would have removed at stop."""
    import shutil

    from ..engine.parent import kill_children

    kill_children()
    stack_dir = os.environ.get(envvars.STACK_DIR)
    if stack_dir:
        shutil.rmtree(stack_dir, ignore_errors=True)


def main() -> None:
    from ..engine.parent import watch_parent
    from ..engine.rankenv import apply_rank_environment, set_threads
    from ..engine.stacks import register

    apply_rank_environment(os.environ)
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if "torch" in sys.modules and threads.isdigit() and int(threads) > 0:
        # Forked with torch loaded (boot.forkserver): OpenMP read OMP_NUM_THREADS in
        # the fork server, not this rank's value.
        set_threads(int(threads))
    watch_parent(before_exit=_after_kernel_died)
    register()
    threading.Thread(target=_preimport, name="dist-notebook-preimport", daemon=True).start()
    if "--IPEngine.enable_nanny=False" in sys.argv:
        _answer_signals()
    _no_execute_input()
    _no_debugger()
    _top_level_await()
    from ipyparallel.engine.app import main as ipengine_main

    sys.argv[0] = "ipengine"
    try:
        ipengine_main()
    except RuntimeError as e:
        # ipyparallel stops its loop on SIGTERM (a normal stop) and tornado reports it
        # as this error; that is a clean exit, anything else is not.
        if "Event loop stopped" not in str(e):
            raise
    # End now: interpreter finalisation (torch's and gloo's teardown, garbage collection
    # of the namespace) took ~3 s per engine and kept stop from returning quickly. The
    # engine holds no data of its own to flush; the user's atexit hooks do not run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
