"""%dist_auto on|off: every following cell runs on the ranks, as if ``%%dist`` began it.

An input transformer (IPython's ``input_transformers_cleanup``, which runs before the
magics are recognised) puts ``%%dist`` on top of the cell the user runs, so the cell is a
``%%dist`` cell in every way: output labelled by rank, errors (a syntax error too) shown
as the rank's IPython shows them, Ctrl-C and timeouts as for ``%%dist``, the notebook's
history keeps the cell as typed.

Left in the kernel, unchanged:
- a cell whose first line starts with ``%`` or ``!`` (``%dist_auto off``, ``%dist_pull x``,
  ``%%timeit``, ``%%dist --ranks 0``: kernel magics in the kernel, dist magics as themselves);
- a cell a front end runs on its own behalf (``silent`` or without history: JupyterLab's
  and the widgets' own requests), which ``%autopx`` sends to the engines and breaks;
- an empty cell.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .args import HELP, help_text, parse
from .session import Session

EXAMPLES = """
  %dist_auto on        every following cell runs on the ranks (as under %%dist)
  %dist_auto off       cells run in the kernel again
  %dist_auto           is it on
"""
_KERNEL_PREFIXES = ("%", "!")


class AutoMode:
    """Whether cells go to the ranks, and the transformer that sends them."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.on = False

    def is_on(self) -> bool:
        return self.on

    def transform(self, lines: list[str]) -> list[str]:
        if not self.on or not self._user_cell():
            return lines
        first = next((line for line in lines if line.strip()), None)
        if first is None or first.lstrip().startswith(_KERNEL_PREFIXES):
            return lines
        return ["%%dist\n", *lines]

    def _user_cell(self) -> bool:
        """Whether the code being transformed is a cell the user runs (not a front end's
        own silent request, nor a completeness check); True outside a Jupyter kernel."""
        kernel = getattr(self.shell, "kernel", None)
        if kernel is None or not hasattr(kernel, "get_parent"):
            return True
        parent = kernel.get_parent("shell") or {}
        if parent.get("msg_type") != "execute_request":
            return False
        content = parent.get("content") or {}
        return not content.get("silent", False) and content.get("store_history", True)


@magics_class
class AutoMagics(Magics):
    def __init__(self, shell: Any, session: Session, mode: AutoMode) -> None:
        super().__init__(shell)
        self.session = session
        self.mode = mode

    @magic_arguments("%dist_auto")
    @HELP
    @argument(
        "state",
        nargs="?",
        choices=("on", "off"),
        help="on: run every following cell on the ranks; off: in the kernel again (no "
        "default: with neither, say whether it is on)",
    )
    @help_text(EXAMPLES)
    @line_magic
    def dist_auto(self, line: str) -> None:
        """Run every following cell on the ranks, as if %%dist were its first line, until
        %dist_auto off. Cells that start with % or ! still run in the kernel."""
        args = parse(self.dist_auto, line)
        if args is None:
            return
        if args.state == "on":
            cluster = self.session.cluster
            if cluster is None or cluster.state.value != "ready":
                raise UsageError(
                    "%dist_auto on needs a ready cluster: start one with %dist_cluster start"
                )
            self.mode.on = True
            print(
                "auto on: every following cell runs on the ranks as under %%dist; cells "
                "that start with % or ! run in the kernel (%dist_auto off to stop)"
            )
        elif args.state == "off":
            self.mode.on = False
            print("auto off: cells run in the kernel")
        else:
            print(f"auto {'on' if self.mode.on else 'off'}")


def register(shell: Any, session: Session) -> AutoMode:
    """%dist_auto and its transformer (a second %load_ext replaces the first's)."""
    mode = AutoMode(shell)
    cleanup = shell.input_transformers_cleanup
    cleanup[:] = [t for t in cleanup if getattr(t, "__name__", "") != "dist_auto_transform"]

    def dist_auto_transform(lines: list[str]) -> list[str]:
        return mode.transform(lines)

    cleanup.append(dist_auto_transform)
    shell.register_magics(AutoMagics(shell, session=session, mode=mode))
    return mode
