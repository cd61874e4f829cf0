"""Clusters that outlive the kernel: ``%dist_cluster start --detach`` and ``attach``.

keeper   the process that holds a detached cluster (python -m dist_notebook.detached.keeper)
link     the signed request/reply link between kernels and a keeper, and its file
attached a kernel's view of a detached cluster (the magics' cluster object)
keptrun  a training run that the keeper runs, followed by the kernel from the run store
sink     the keeper's side of a run's output: into the run store, for the kernel
"""
