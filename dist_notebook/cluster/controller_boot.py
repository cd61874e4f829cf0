"""Entry point of the controller process: parent watch, then ipyparallel's controller."""

from __future__ import annotations

import sys


def _remove_cluster_files() -> None:
    """After the kernel died: remove this cluster's files from the security dir (the
    connection files, which hold its key, and ipyparallel's cluster file), as a clean
    stop would have done."""
    import contextlib
    import glob
    import os

    profile, cluster_id = os.environ.get("IPP_PROFILE_DIR"), os.environ.get("IPP_CLUSTER_ID")
    if not profile or not cluster_id:
        return
    security = os.path.join(profile, "security")
    names = [f"cluster-{cluster_id}.json", f"ipcontroller-{cluster_id}-*.json"]
    for pattern in names:
        for path in glob.glob(os.path.join(glob.escape(security), pattern)):
            # Already removed (by a clean stop racing us) is the outcome we want.
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


def main() -> None:
    from dist_notebook.engine.parent import watch_parent

    watch_parent(before_exit=_remove_cluster_files)
    from ipyparallel.controller.app import main as controller_main

    sys.argv[0] = "ipcontroller"
    controller_main()


if __name__ == "__main__":
    main()
