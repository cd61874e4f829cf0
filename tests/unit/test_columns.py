"""The compact wire format (dist_notebook/columns.py): the same records as the protocol's
JSON rows, the store's JSON text of each record's metrics, and refusals of what is not one."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from dist_notebook import columns, protocol
from dist_notebook.engine import reporter
from dist_notebook.protocol import Record, WireError
from dist_notebook.store.writer import _json

RUN = "cols-run"
NAN, INF = float("nan"), float("inf")


def row(step: Any, **metrics: float) -> list[Any]:
    return [step, 1.7e9 + (step or 0), 0.01, 0.002, 32.0, metrics, None]


BATCHES = {
    "usual": [row(s, loss=1.0 / (s + 1), lr=3e-4) for s in range(50)],
    "first of a run": [[0, 1.7e9, None, None, None, {"loss": 2.5}, None], row(1, loss=2.0)],
    "no metrics": [row(s) for s in range(3)],
    "names change": [row(0, loss=1.0), row(1, acc=0.5), row(2, loss=0.5, acc=0.7), row(3)],
    "other order": [
        row(0, loss=1.0, lr=0.1),
        [1, 2.0, 0.1, None, 8.0, {"lr": 0.2, "loss": 0.9}, None],
    ],
    "not finite": [row(0, loss=NAN, lr=INF), row(1, loss=-INF, lr=1.0)],
    "no step": [row(None, loss=1.0), row(4, loss=0.5)],
    "gpu": [
        [3, 1.0, 0.1, 0.0, None, {"loss": 1.0}, {"util": 0.5, "mem": 2e9, "power": 300.0}],
        row(4, loss=0.9),
    ],
    "odd names": [row(0, **{"l%s": 1.0, 'q"u': 2.0, "é": 3.0, "%%": 4.0})],
    "big steps": [row((1 << 62) + 1, loss=1.0), row(-5, loss=1.0)],
    "empty": [],
}


def same(a: Record, b: Record) -> bool:
    """Equal records, NaN equal to NaN (the metrics' order aside: a mapping)."""

    def eq(x: Any, y: Any) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return x == y or (math.isnan(x) and math.isnan(y))
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(eq(x[k], y[k]) for k in x)
        return x == y

    fields = ("rank", "step", "time", "step_time", "comm_time", "samples", "metrics", "gpu")
    return all(eq(getattr(a, f), getattr(b, f)) for f in fields)


def by_protocol(rows: list[list[Any]], end: bool) -> tuple[int, list[Record], bool]:
    text = json.dumps(protocol.wire_message(RUN, 5, rows, end=end))
    return protocol.decode_message(json.loads(text), RUN)


@pytest.mark.parametrize("name", list(BATCHES))
@pytest.mark.parametrize("end", [False, True])
def test_columns_carry_the_same_records_as_the_protocols_rows(name: str, end: bool) -> None:
    rows = BATCHES[name]
    payload = columns.encode(RUN, 5, rows, end=end)
    assert payload is not None
    at = columns.is_columns(payload)
    rank, records, got_end, texts = columns.read(payload, at, RUN)
    want_rank, want, want_end = by_protocol(rows, end)
    assert (rank, got_end, len(records)) == (want_rank, want_end, len(want))
    assert all(same(a, b) for a, b in zip(records, want, strict=True))
    assert columns.decode(payload, at, RUN)[1] == records or name == "not finite"
    # The store's text of each record's metrics, when made here, is the writer's own
    # (a record's names in the batch's order: the same JSON object).
    if texts is not None:
        assert texts == [_json(r.metrics) for r in records]
        assert [json.loads(t) for t in texts] == [json.loads(_json(r.metrics)) for r in want]
    if name in ("usual", "odd names", "no metrics", "big steps"):
        assert texts is not None
    if name in ("not finite", "names change"):
        assert texts is None  # the writer writes them ("nan" ...; absent names)


def test_columns_are_smaller_than_the_rows() -> None:
    rows = BATCHES["usual"]
    payload = columns.encode(RUN, 5, rows)
    assert payload is not None
    assert len(payload) < 0.75 * len(json.dumps(protocol.wire_message(RUN, 5, rows)))


def test_a_batch_the_columns_do_not_fit_goes_as_the_protocols_rows() -> None:
    too_big = [row(1 << 70, loss=1.0)]
    assert columns.encode(RUN, 0, too_big) is None
    payload = reporter._payload(RUN, 0, too_big, True)
    assert columns.is_columns(payload) == -1  # JSON rows, which the kernel also reads
    rank, (rec,), end = protocol.decode_message(json.loads(payload), RUN)
    assert (rank, rec.step, rec.metrics, end) == (0, 1 << 70, {"loss": 1.0}, True)
    # A value that is not a float (report() makes floats; anything else is the rows' case).
    assert columns.encode(RUN, 0, [row(1, loss=object())]) is None  # type: ignore[arg-type]


def payload_with(header: dict[str, Any], body: bytes) -> bytes:
    return json.dumps(header).encode() + b"\n" + body


def good_header(**changes: Any) -> dict[str, Any]:
    head = {"v": columns.VERSION, "run": RUN, "rank": 1, "end": False, "n": 2}
    head.update(cols=["step", "time", "m:loss"])
    head.update(changes)
    return head


BODY = b"\0" * 8 * 2 * 3


@pytest.mark.parametrize(
    "payload",
    [
        payload_with(good_header(run="another"), BODY),
        payload_with(good_header(v=2), BODY),
        payload_with(good_header(), BODY[:-8]),
        payload_with(good_header(n=3), BODY),
        payload_with(good_header(n=-1), b""),
        payload_with(good_header(rank="1"), BODY),
        payload_with(good_header(cols=["time", "step", "m:loss"]), BODY),
        payload_with(good_header(cols=["step", "time", "m:loss", "m:loss"]), BODY + b"\0" * 16),
        payload_with(good_header(cols=["step", "time", "loss"]), BODY),
        payload_with(good_header(cols=["step", "time", "m:loss", "samples"]), BODY + b"\0" * 16),
        payload_with(good_header(cols=["step", "time", "samples", "step_time"]), BODY + b"\0" * 16),
        payload_with(good_header(gaps={"m:loss": [2]}), BODY),
        payload_with(good_header(gaps={"time": [0]}), BODY),
        payload_with(good_header(gaps={"comm_time": [0]}), BODY),
        payload_with(good_header(gaps={"step": "0"}), BODY),
        payload_with(good_header(gpu={"2": {"util": 1.0}}), BODY),
        payload_with(good_header(gpu={"x": {"util": 1.0}}), BODY),
        payload_with(good_header(gpu={"0": 1.0}), BODY),
        b"{not json\n" + BODY,
        b"[1, 2]\n" + BODY,
    ],
)
def test_what_is_not_a_batch_of_this_run_is_refused(payload: bytes) -> None:
    at = columns.is_columns(payload)
    assert at >= 0
    with pytest.raises(WireError):
        columns.read(payload, at, RUN)


def test_a_header_checked_for_one_run_is_not_taken_for_another() -> None:
    payload = columns.encode(RUN, 1, [row(0, loss=1.0)])
    assert payload is not None
    at = columns.is_columns(payload)
    assert columns.read(payload, at, RUN)[0] == 1
    with pytest.raises(WireError):
        columns.read(payload, at, "another-run")


def test_rows_json_has_no_newline_so_it_is_never_taken_for_columns() -> None:
    rows = [row(0, **{"line\nbreak": 1.0})]
    text = json.dumps(protocol.wire_message(RUN, 0, rows), separators=(",", ":")).encode()
    assert columns.is_columns(text) == -1
