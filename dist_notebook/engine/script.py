"""Run a torchrun-style script on this rank, unchanged.

The script sees ``__name__ == "__main__"``, its own ``sys.argv``, and the env that
torchrun would give it (RANK, WORLD_SIZE, MASTER_ADDR/PORT of a live store), so its
own ``dist.init_process_group()`` works.
"""

from __future__ import annotations

import runpy
import sys
import traceback


def run_script(path: str, argv: list[str]) -> int:
    """Run *path* as ``__main__`` with ``sys.argv = [path, *argv]``; return its exit status."""
    saved = sys.argv
    sys.argv = [path, *argv]
    try:
        runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        sys.argv = saved
        sys.stdout.flush()
        sys.stderr.flush()
