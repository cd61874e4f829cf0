"""Entry point of the controller process: parent watch, then ipyparallel's controller.

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
            import shutil

            shutil.rmtree(profile, ignore_errors=True)


def _watch_controller_in_child(controller: int) -> None:
    """In a forked scheduler: end once the controller (our parent) is gone."""
    from dist_notebook.engine.parent import watch_pid

    watch_pid(controller)


def main() -> None:
    import dist_notebook.cluster.reap  # noqa: F401 - loaded now, used at the kernel's death
    from dist_notebook.engine.parent import watch_parent

    watch_parent(before_exit=_remove_cluster_files)
    controller = os.getpid()
    os.register_at_fork(after_in_child=lambda: _watch_controller_in_child(controller))
    from ipyparallel.controller.app import main as controller_main

    sys.argv[0] = "ipcontroller"
    controller_main()


if __name__ == "__main__":
    main()
