"""Ranks on a Ray cluster (``--launcher ray``), one module a job.

- ``strategy``: what ``--launcher ray`` does differently (the cluster's engines strategy).
- ``launcher``: ipyparallel's engine-set launcher: a placement group, an actor per rank.
- ``actor``: the actor, on a Ray node, that holds a rank's resources and its engine.
- ``placement``: the bundles, whether Ray could hold them, where each went (pure).
- ``reasons``: Ray's word on a rank's death, in one line.

Ray is imported only when a Ray cluster is started (``cluster.rayconnect``).
"""
