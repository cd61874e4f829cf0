"""What the kernel runs on the ranks of a started cluster, and how it reads the outcome.

The rest of ``cluster/`` brings a cluster up, keeps it healthy and takes it down; the
modules here use a cluster that is up, one job each:

- ``outputs``: what a cell gives back (RankOutput) and the errors it raises (RankError).
- ``execute``: run a cell or a function on ranks, stream each rank's output, map errors
  (and a rank's death or an interrupt) to ranks;
- ``recovery``: free ranks stuck in a collective with a rank that already stopped;
- ``mismatch``: name a collective the ranks disagree on (a rank skipped it, or called
  another op) within seconds, and free the ranks that wait in it;
- ``transfer``: push values to the ranks and pull expressions back;
- ``scripts``: run a torchrun-style script on every rank;
- ``stacks``: the hang report, every rank's current Python stack;
- ``tracebacks``: a failure on the ranks written as Python writes its own.

The name says where the work happens ("on ranks"), as ``engines/`` says which launcher
starts them. Nothing is imported here: ``tracebacks`` loads without ipyparallel's
client.
"""
