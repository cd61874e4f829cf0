"""%%dist_train and %dist_runs (training runs)."""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics, magics_class

from .session import Session


@magics_class
class TrainMagics(Magics):
    def __init__(self, shell: Any, session: Session) -> None:
        super().__init__(shell)
        self.session = session
