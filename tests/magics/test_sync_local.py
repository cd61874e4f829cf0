"""%dist_sync on a cluster of this machine says there is nothing to copy (one line)."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError


def test_sync_on_local_ranks_says_they_see_these_files(shell: Any, cluster2: Any) -> None:
    with pytest.raises(UsageError) as caught:
        shell.run_line_magic("dist_sync", "")
    message = str(caught.value)
    assert "nothing to sync: this cluster's ranks run on this machine" in message, message
    assert "\n" not in message
