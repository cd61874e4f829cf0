"""Real machinery that tests/ and bench/ share: nothing here is a stub.

- ``hosts``, ``sshd``, ``slurm``: test hosts as network namespaces on this machine, with
  their own OpenSSH servers and a real Slurm cluster (root; ``make testhosts`` installs
  the packages);
- ``exercises``, ``notebook_runner``: the teaching notebooks' exercise mechanism and the
  runner that proves it in a real kernel;
- ``cells``: cells both run on the ranks (the DDP training cell).
"""
