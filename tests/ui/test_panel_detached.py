"""A detached cluster in the side panel (issue #27), in a real JupyterLab: its card says
it is detached and when it stops by itself, and the panel's Stop ends it (its keeper and
every process under it), with no kernel of the notebook's involved."""

from __future__ import annotations

import psutil
import pytest
from playwright.sync_api import expect

from dist_notebook.cluster.spec import ClusterSpec
from dist_notebook.detached.attached import start_detached

from .conftest import open_lab, open_panel, shot

pytestmark = pytest.mark.timeout(300)


def test_the_panel_shows_a_detached_cluster_and_its_stop_ends_it(  # type: ignore[no-untyped-def]
    lab, page, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIST_NOTEBOOK_STORE", str(lab.store))
    cluster = start_detached(ClusterSpec(n=2, threads=1), 1800.0, progress=lambda _: None)
    keeper = psutil.Process(cluster.keeper_pid)
    tree = [keeper, *keeper.children(recursive=True)]
    cluster.detach()  # no kernel holds it: the panel's Stop goes to its keeper
    try:
        open_lab(page, lab)
        panel = open_panel(page)
        card = panel.locator(f".dn-cluster[data-state='ready']:has-text('{cluster.id}')")
        badge = card.locator(".dn-cluster-detached")
        expect(badge).to_have_text("detached · stops after 30 min unused", timeout=30_000)
        assert str(cluster.keeper_pid) in (badge.get_attribute("title") or "")
        card.scroll_into_view_if_needed()
        shot(page, "panel-detached")
        card.locator(".dn-stop-button").click()
        page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-warn").click()  # confirm Stop
        expect(page.locator(".jp-Dialog")).to_have_count(0, timeout=90_000)
        # Out of the live list, into the history as stopped (its keeper wrote the stop).
        expect(panel.locator(f".dn-cluster[data-key='{cluster.id}']")).to_have_count(
            0, timeout=60_000
        )
        ended = panel.locator(f".dn-ended-cluster[data-cluster-id='{cluster.id}']")
        expect(ended).to_have_attribute("data-state", "stopped", timeout=30_000)
        gone, alive = psutil.wait_procs(tree, timeout=30)
        assert not alive, f"processes of the detached cluster left: {alive}"
    finally:
        for proc in tree:
            if proc.is_running():
                proc.kill()
