"""Where a cluster's ipyparallel profile folder lives: beside the run store, per user.

profile = own_profile_dir(cluster.id)   # .../ipython/cluster-<id>, owner-only
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from .. import envvars
from ..privatedir import UnsafeDirectoryError, private_dir
from ..store import store_path
from .errors import ClusterError

log = logging.getLogger("dist_notebook")


def own_profile_dir(cluster_id: str) -> str:
    """The cluster's own ipyparallel profile directory, beside the run store (per user,
    owner-only), never one of the user's IPython profiles: ipyparallel's own panel, its
    logs and cluster files, and other kernels' clusters never mix with it.

    Where the store's directory cannot be written (a read-only one: the store never
    stops a cluster), the profile goes to a per-user folder in the temporary directory.
    The per-user folders there are made owner-only, or reused only when they are this
    user's and private (dist_notebook.privatedir): a folder another user planted in
    advance is refused, never used.
    """
    fallback = Path(tempfile.gettempdir()) / f"dist-notebook-{os.getuid()}"
    for top, base in ((None, store_path().parent / "ipython"), (fallback, fallback / "ipython")):
        profile = base / f"cluster-{cluster_id}"
        try:
            if top is not None:
                private_dir(top)
            private_dir(base)  # the folder that keeps others out of what is inside
            profile.mkdir(exist_ok=True, mode=0o700)  # fails on a read-only directory
        except OSError as e:
            log.debug("no profile directory in %s: %s", base, e)
            continue
        except UnsafeDirectoryError as e:
            raise ClusterError(str(e)) from None
        return str(profile)
    raise ClusterError(
        f"cannot create a profile directory for the cluster in {store_path().parent} or "
        f"{fallback}: set {envvars.STORE} to a file in a directory you can write"
    )


def stacks_dir(cluster_id: str) -> str:
    """Where the ranks of a cluster on this machine dump their stacks on SIGUSR1
    (cluster/onranks/stacks.py): in the cluster's own (owner-only) profile folder, so
    whoever removes that folder (a stop, or the controller when the kernel died)
    removes this too. Remote ranks get none: a folder here would be one that other
    hosts lack, and that nobody removes when the kernel is killed."""
    stacks = Path(own_profile_dir(cluster_id)) / "stacks"
    stacks.mkdir(exist_ok=True, mode=0o700)
    return str(stacks)
