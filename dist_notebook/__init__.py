"""dist-notebook: interactive distributed PyTorch training from Jupyter.

%load_ext dist_notebook
%dist_cluster start -n 2 --cpu
"""

from .cluster import ClusterSpec, DistCluster
from .engine import report
from .training import load_run

__all__ = ["ClusterSpec", "DistCluster", "load_ipython_extension", "load_run", "report"]


def load_ipython_extension(ipython):  # type: ignore[no-untyped-def]
    from .magics import register

    register(ipython)
