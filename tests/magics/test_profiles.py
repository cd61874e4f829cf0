"""Each cluster has its own ipyparallel profile directory beside the run store, so
ipyparallel's own JupyterLab panel, logs and cluster files never list or mix with ours."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from ipyparallel.cluster import ClusterManager

from dist_notebook.store import store_path

pytestmark = pytest.mark.timeout(60)


def test_a_cluster_has_its_own_profile_dir(cluster2: Any) -> None:
    profile = Path(cluster2.profile_dir)
    assert profile == store_path().parent / "ipython" / f"cluster-{cluster2.id}"
    assert (profile / "security").is_dir()
    assert oct(os.stat(profile.parent).st_mode & 0o777) == "0o700"
    # ipyparallel's panel lists the clusters of the IPython profiles: ours is not there.
    listed = ClusterManager().load_clusters()
    assert not any(c.profile_dir == str(profile) for c in listed.values())
