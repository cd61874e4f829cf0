"""Entry point of an engine process: ``python -m dist_notebook.engine.boot [ipengine args]``.

Sets the rank environment before anything imports torch, starts watching the parent,
starts importing torch in the background (about 2 s that would otherwise fall on the
first cell), then hands over to ipyparallel's engine.
"""

from __future__ import annotations

import os
import sys
import threading


def _preimport() -> None:
    # Runs while the engine registers with the controller; the first process-group
    # creation then finds torch already imported.
    import torch.distributed  # noqa: F401


def _after_kernel_died() -> None:
    """End our nanny (it would wait 3 s to tell a dead controller) and remove the
    cluster's stack folder, which the kernel would have removed at stop."""
    import shutil

    from .parent import kill_children

    kill_children()
    stack_dir = os.environ.get("DIST_NOTEBOOK_STACK_DIR")
    if stack_dir:
        shutil.rmtree(stack_dir, ignore_errors=True)


def main() -> None:
    from .parent import watch_parent
    from .rankenv import apply_rank_environment
    from .stacks import register

    apply_rank_environment(os.environ)
    watch_parent(before_exit=_after_kernel_died)
    register()
    threading.Thread(target=_preimport, name="dist-notebook-preimport", daemon=True).start()
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
