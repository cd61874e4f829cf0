"""Entry point of the controller process: parent watch, then ipyparallel's controller."""

from __future__ import annotations

import sys


def main() -> None:
    from dist_notebook.engine.parent import watch_parent

    watch_parent()
    from ipyparallel.controller.app import main as controller_main

    sys.argv[0] = "ipcontroller"
    controller_main()


if __name__ == "__main__":
    main()
