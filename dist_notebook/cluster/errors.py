"""What the kernel side of a cluster raises; the messages name the fix.

Kept apart from the modules that raise them (the lifecycle, scale, the engines'
strategies) so that each of those imports this one and none imports another back.
"""

from __future__ import annotations


class ClusterError(RuntimeError):
    """The cluster could not do what was asked; the message says why and what to do."""


class ScaleError(RuntimeError):
    """The cluster cannot be scaled as asked; the message names the fix."""


class GrowError(ScaleError):
    """New engines did not start; the cluster goes on with the engines it kept."""

    def __init__(self, message: str, kept: list[int]) -> None:
        super().__init__(message)
        self.kept = kept
