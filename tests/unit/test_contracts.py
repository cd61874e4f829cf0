"""The shapes that cross the wire (dist_notebook/contracts.py): declared once, generated
for TypeScript, and what the live view really sends has exactly the declared keys.

The REST answers of a real Jupyter server are checked in tests/server/test_api_contracts.py
(and the actions' answers in tests/server/test_actions.py and test_control.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_type_hints

import anywidget
import pytest
from wireshape import assert_shape, mismatches

from dist_notebook import contracts
from dist_notebook.display.live import LiveFeed, LiveRunWidget
from dist_notebook.metrics import RunMetrics
from dist_notebook.protocol import Record

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "extension" / "src"


def test_the_typescript_side_is_generated_from_the_contracts() -> None:
    committed = (SRC / "contracts.ts").read_text()
    assert committed == contracts.typescript(), (
        "extension/src/contracts.ts is out of date: run `make ext-generate` "
        "(python -m dist_notebook.contracts > extension/src/contracts.ts)"
    )


def test_no_front_end_file_declares_a_contract_again() -> None:
    """The front end imports these interfaces from contracts.ts; a second, hand-written
    copy of one is how the two sides drifted apart."""
    names = [f"I{cls.__name__}" for cls in (*contracts.REST, *contracts.WIDGET)]
    names += [*contracts.ALIASES, "ISeqRecord"]
    copies = []
    for path in sorted(SRC.rglob("*.ts")):
        if path.name in ("contracts.ts", "protocol.ts"):
            continue
        text = path.read_text()
        for name in names:
            if re.search(rf"\b(interface|type)\s+{name}\b", text):
                copies.append(f"{path.relative_to(SRC)}: {name}")
    assert copies == [], copies


def test_the_live_widgets_synced_traits_are_the_declared_ones() -> None:
    # anywidget's own (layout, tooltip ...) and its frame (_esm, _css, _model_name ...)
    own = set(anywidget.AnyWidget().trait_names(sync=True))
    traits = {t for t in LiveRunWidget().trait_names(sync=True) if t[0] != "_"} - own
    assert traits == set(get_type_hints(contracts.LiveTraits))
    widget = LiveRunWidget(name="n", run_id="r", state="running", steps=5, started=1.0)
    widget.rank_states = {"0": "running", "1": "done"}
    state = {k: v for k, v in widget.get_state().items() if k in traits}
    assert_shape(state, contracts.LiveTraits)


def _feed(ranks: list[int]) -> tuple[LiveFeed, RunMetrics, list[Any]]:
    metrics = RunMetrics(ranks, hosts={r: "h" for r in ranks})
    widget = LiveRunWidget(name="n", run_id="r")
    sent: list[Any] = []
    widget.send = lambda content, buffers=None: sent.append(content)  # type: ignore[method-assign]
    feed = LiveFeed(widget, metrics, lambda: metrics.run_summary("r", "running", 10), 60)
    return feed, metrics, sent


def test_the_records_message_a_real_feed_sends_has_the_declared_keys() -> None:
    feed, metrics, sent = _feed([0, 1])
    metrics.add(
        [
            Record(r, s, 100.0 + s, 0.1, 0.01, 8.0, {"loss": 1.0 / (s + 1)})
            for s in range(3)
            for r in (0, 1)
        ]
    )
    feed.flush()  # new records: a batch, with the summary
    feed.history()  # a late view's hello: the whole history, with reset
    assert [m.get("reset", False) for m in sent] == [False, True]
    for message in sent:
        assert_shape(message, contracts.RecordsMessage)
        assert message["records"] and message["summary"]["ranks"]


def test_a_message_with_a_key_more_or_less_is_caught() -> None:
    """The check itself: a key the contract does not declare, or a missing one, fails."""
    good = {"kind": "records", "records": [], "summary": None, "clock": 1.0}
    assert mismatches(good, contracts.RecordsMessage) == []
    extra = mismatches({**good, "end": True}, contracts.RecordsMessage)
    assert extra == ["$: key 'end' is not declared in RecordsMessage"]
    missing = {k: v for k, v in good.items() if k != "clock"}
    assert mismatches(missing, contracts.RecordsMessage) == [
        "$: required key 'clock' of RecordsMessage is missing"
    ]
    assert mismatches({**good, "kind": "record"}, contracts.RecordsMessage)


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        ({"kind": "hello"}, "hello"),
        ({"kind": "stop"}, "stop"),
        ({"kind": "records"}, None),  # the kernel's own kind, never the view's
        ({"kind": "Stop"}, None),
        ("stop", None),
        (None, None),
    ],
)
def test_the_kernel_takes_only_the_views_declared_messages(content: Any, kind: Any) -> None:
    assert contracts.view_message_kind(content) == kind
    assert contracts.VIEW_KINDS == {"hello", "stop"}
