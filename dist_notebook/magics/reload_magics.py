"""%dist_autoreload on|off: IPython's autoreload on every rank (the kernel's own untouched);
%dist_sync [DIR]: the edited code onto the remote hosts (cluster/sync.py)."""

from __future__ import annotations

import subprocess
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ..cluster import ClusterError
from ..cluster.onranks.execute import apply_on_ranks
from ..cluster.sync import SyncError, sync
from ..engine import reload
from .args import HELP, help_text, parse
from .session import Session

EXAMPLES = """
  %dist_autoreload on      edited modules are reloaded on every rank before each cell
  %dist_autoreload off     stop reloading
  %dist_autoreload         is it on, rank by rank
"""


SYNC_EXAMPLES = """
  %dist_sync               this notebook's folder onto every remote host (ssh, mpi clusters)
  %dist_sync src           the folder src, at the same path there
"""


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, ranks))}"


@magics_class
class ReloadMagics(Magics):
    def __init__(self, shell: Any, session: Session) -> None:
        super().__init__(shell)
        self.session = session

    @magic_arguments("%dist_autoreload")
    @HELP
    @argument(
        "state",
        nargs="?",
        choices=("on", "off"),
        help="on: reload edited modules before each cell on the ranks; off: stop (no "
        "default: with neither, say whether it is on)",
    )
    @help_text(EXAMPLES)
    @line_magic
    def dist_autoreload(self, line: str) -> None:
        """IPython's autoreload (mode 2, every module) on every rank: edit a module on disk,
        run the next cell, and the ranks run the new code. The kernel's own autoreload is
        left as it is; a rank replaced by a restart starts with it off."""
        args = parse(self.dist_autoreload, line)
        if args is None:
            return
        cluster = self.session.ready_cluster()
        wanted = None if args.state is None else args.state == "on"
        try:
            outputs = apply_on_ranks(cluster, reload.set_autoreload, wanted)
        except ClusterError as e:
            raise UsageError(str(e)) from None
        on = sorted(o.rank for o in outputs if o.value)
        off = sorted(o.rank for o in outputs if not o.value)
        if wanted is True:
            print(f"autoreload on for {_ranks(on)}: edited modules are reloaded before each cell")
        elif wanted is False:
            print(f"autoreload off for {_ranks(off)}")
        else:
            parts = [f"on for {_ranks(on)}" if on else "", f"off for {_ranks(off)}" if off else ""]
            print("autoreload " + ", ".join(p for p in parts if p))

    @magic_arguments("%dist_sync")
    @HELP
    @argument(
        "folder",
        nargs="?",
        help="the folder to copy to every remote host, at the same path (default: the"
        " notebook's working directory)",
    )
    @help_text(SYNC_EXAMPLES)
    @line_magic
    def dist_sync(self, line: str) -> None:
        """Copy a folder of this machine to every remote host of the cluster (ssh, mpi),
        at the same path, through the launcher's ssh: rsync when both ends have it (only
        what changed), else tar. With %dist_autoreload on, the next cell runs the new code."""
        args = parse(self.dist_sync, line)
        if args is None:
            return
        cluster = self.session.ready_cluster()
        try:
            done = sync(cluster, args.folder)
        except (SyncError, OSError, subprocess.TimeoutExpired) as e:
            raise UsageError(f"%dist_sync: {e}") from None
        print(
            f"synced {done.files} files ({done.size / 1024:.0f} kB) to {', '.join(done.hosts)}"
            f" in {done.seconds:.1f} s ({done.tool})"
        )
