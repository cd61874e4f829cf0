"""A rank freed from a collective by its peer's failure reads ``released``, not ``failed``
(the session's real 2-rank gloo cluster): rank 1 raises at step 5 of a DDP loop while
rank 0 waits in the step's all-reduce; the run fails, rank 1 is ``failed`` with its error,
rank 0 ``released``, in the run's result, the run store (what the panel shows) and the
end's table.
"""

from __future__ import annotations

from typing import Any

import pytest
from IPython.utils.capture import capture_output

from dist_notebook.cluster.onranks.execute import RankError
from dist_notebook.store import StoreReader

pytestmark = pytest.mark.timeout(180)


def test_a_rank_freed_by_its_peers_error_reads_released(trainer: Any, shell: Any) -> None:
    with capture_output(), pytest.raises(RankError) as raised:
        shell.run_cell_magic(
            "dist_train", "--name peer-failed", "train(40, ddp=True, fail_rank=1, fail_at=5)"
        )
    assert raised.value.rank == 1 and raised.value.ename == "ValueError"
    assert "[rank 0] released after rank 1 raised ValueError" in "\n".join(
        raised.value._render_traceback_()
    )
    result, run = trainer.last_result, trainer.last_run
    assert result.state.value == "failed", result
    assert result.rank_states == {0: "released", 1: "failed"}, result.rank_states
    stored = StoreReader().run(run.id)
    assert stored is not None and stored["state"] == "failed", stored
    ranks = {r["rank"]: r for r in stored["ranks"]}
    assert ranks[0]["state"] == "released" and ranks[1]["state"] == "failed", ranks
    assert "bad batch at step 5" in ranks[1]["error"], ranks
    text = trainer.last_dashboard.final_bundle["text/plain"]
    assert "rank 0: released" in text and "rank 1: failed" in text, text
    # The cluster is usable again, process group included.
    with capture_output():
        shell.run_cell_magic("dist", "", "t = torch.ones(1); dist.all_reduce(t); after = t.item()")
    assert shell.run_line_magic("dist_pull", "--all after") == {0: 2.0, 1: 2.0}
