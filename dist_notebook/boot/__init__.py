"""The first module of each process the kernel starts beside itself, one per process kind.

- ``engine``: a rank (``python -m dist_notebook.boot.engine [ipengine args]``): its rank
  environment and parent watch, then ipyparallel's engine;
- ``controller``: the cluster's controller (``python -m dist_notebook.boot.controller``):
  parent watch and clean-up at the kernel's death, then ipyparallel's controller;
- ``forkserver``: the fork server local engines are forked from
  (``python -m dist_notebook.boot.forkserver``), which runs ``engine`` in each child.

They are neither kernel side (``cluster/``) nor engine side (``engine/``): each is the top
of its own process and may use both, as the controller's clean-up uses ``cluster.reap``
and ``engine.parent``. The launchers' command lines name these modules; the old paths
(``dist_notebook.engine.boot``, ``dist_notebook.cluster.controller_boot``,
``dist_notebook.engine.forkserver``), still named in command lines written before the
move (a Slurm batch file, a user's launcher config), start the same code. Nothing is
imported here: a process imports only its own entry point.
"""
