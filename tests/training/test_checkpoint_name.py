"""``%%dist_train --name ../.. --checkpoint-every N`` on the session's 2-rank cluster: the
checkpoints would go to checkpoints/../.. (outside checkpoints/, where the run wrote
before); the cell is refused in one line naming the fix, and no run starts."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_a_name_that_leaves_checkpoints_is_refused(shell: Any, cluster2: Any) -> None:
    cell = "report(step=0, loss=1.0)\n"
    for name in ("../..", "a/b"):
        with pytest.raises(UsageError) as info:
            shell.run_cell_magic("dist_train", f"--name {name} --checkpoint-every 1", cell)
        message = str(info.value)
        assert message.startswith("%%dist_train: --name") and "\n" not in message, message
        assert "checkpoints/NAME" in message and "--checkpoint-dir DIR" in message
    result = shell.run_cell("%%dist_train --name plain --no-dashboard\n" + cell)
    assert result.success, result.error_in_exec  # the cluster was not claimed by a refusal
