"""The compact wire format of a batch of records (rank -> kernel): columns of binary numbers.

``report()``'s rows (``[step, time, step_time, comm_time, samples, {metrics}, gpu,
cpu_time, run_delay, load, cores, data_time, peak_mem]``) go as one payload: a JSON
header, a newline, then the batch's columns as little-endian binary: the steps (int64),
then time, step_time, comm_time, samples, the step's measures and each metric (float64),
``n`` values each. The header says which columns the body holds and where a column has
no value (``None``: a first record's step time, a metric a record did not report)::

    {"v": 3, "run": ..., "rank": ..., "end": ..., "n": N, "cols": ["step", "time", ...,
     "m:loss", ...], "gaps": {"step_time": [0]}, "gpu": {"7": {"util": ...}}}

A system column left out of ``cols`` is ``None`` in every record; a metric left out is
in no record. Parsing JSON's text numbers was most of the kernel's cost of a record (and
the text twice the bytes to sign); these columns are read as machine numbers at once.
The records are ``protocol.Record``s, the same as the rows of ``protocol``'s wire
format (version 2), which the kernel still takes from a rank of an older install.
"""

from __future__ import annotations

import json
import sys
from array import array
from itertools import repeat
from typing import Any

from .protocol import GPU_FIELDS, STEP_MEASURES, Record, WireError, from_json_value

VERSION = 3
# float64 columns that may have no value: a row's step_time, comm_time and samples, and
# after its gpu, the step's measures (a row of 7, as before them, has none).
SYSTEM = ("step_time", "comm_time", "samples", *STEP_MEASURES)
_WIDTH = 7 + len(STEP_MEASURES)
_LITTLE = sys.byteorder == "little"
_FLOAT = frozenset((float,))


def _column(values: list[Any], gaps: dict[str, list[int]], name: str) -> list[Any] | None:
    """*values* as a column of floats (``None`` -> 0.0, listed in *gaps*); None when no
    value is given at all."""
    if None not in values:
        return values
    missing = [i for i, v in enumerate(values) if v is None]
    if len(missing) == len(values):
        return None
    gaps[name] = missing
    return [0.0 if v is None else v for v in values]


def encode(run_id: str, rank: int, rows: list[list[Any]], end: bool = False) -> bytes | None:
    """One payload for *rows* (report()'s rows, floats read); None when a row does not fit
    this format (a step beyond int64, a value that is not a float): then send the rows in
    ``protocol``'s format."""
    n = len(rows)
    fields = [list(f) for f in zip(*rows, strict=True)] if n else [[] for _ in range(_WIDTH)]
    steps, times, step_times, comm_times, samples, metrics, gpus = fields[:7]
    measures = fields[7:_WIDTH] + [[None] * n] * (_WIDTH - max(7, len(fields)))
    gaps: dict[str, list[int]] = {}
    cols = ["step", "time"]
    try:
        if None in steps:
            gaps["step"] = [i for i, s in enumerate(steps) if s is None]
            steps = [0 if s is None else s for s in steps]
        arrays = [array("q", steps), array("d", times)]
        system = (step_times, comm_times, samples, *measures)
        for name, values in zip(SYSTEM, system, strict=True):
            column = _column(values, gaps, name)
            if column is not None:
                cols.append(name)
                arrays.append(array("d", column))
        first = metrics[0].keys() if n else {}.keys()
        if all(m.keys() == first for m in metrics):  # the usual batch: the same names
            for k in first:
                cols.append("m:" + k)
                arrays.append(array("d", [m[k] for m in metrics]))
        else:
            for k in dict.fromkeys(k for m in metrics for k in m):
                column = _column([m.get(k) for m in metrics], gaps, "m:" + k)
                cols.append("m:" + k)
                arrays.append(array("d", column or []))
        if gpus.count(None) != n:
            gpu = {str(i): g for i, g in enumerate(gpus) if g is not None}
        header: dict[str, Any] = {"v": VERSION, "run": run_id, "rank": rank, "end": end}
        header.update(n=n, cols=cols)
        if gaps:
            header["gaps"] = gaps
        if gpus.count(None) != n:
            header["gpu"] = gpu
        head = json.dumps(header, separators=(",", ":")).encode()
    except (TypeError, OverflowError, ValueError):
        return None
    if not _LITTLE:
        for a in arrays:
            a.byteswap()
    return b"".join([head, b"\n", *(a.tobytes() for a in arrays)])


def is_columns(payload: bytes) -> int:
    """Where a payload of this format has its newline; -1 for protocol's JSON (whose
    text never holds a raw newline)."""
    return payload.find(b"\n")


class _Head:
    """A header, checked, with what reading its body needs."""

    __slots__ = ("run", "rank", "n", "end", "names", "floats", "system", "gaps", "gpu", "template")

    def __init__(self, head: Any, run_id: str) -> None:
        if type(head) is not dict or head.get("v") != VERSION or head.get("run") != run_id:
            raise WireError("not a message of this run")
        rank, n, cols = head.get("rank"), head.get("n"), head.get("cols")
        gaps, gpu = head.get("gaps") or {}, head.get("gpu") or {}
        if (
            type(rank) is not int
            or type(n) is not int
            or n < 0
            or type(cols) is not list
            or cols[:2] != ["step", "time"]
            or len(set(cols)) != len(cols)
            or not all(type(c) is str and (c in SYSTEM or c.startswith("m:")) for c in cols[2:])
            or type(gaps) is not dict
            or type(gpu) is not dict
        ):
            raise WireError("a batch's header needs a rank, n and its columns")
        for name, where in gaps.items():
            if name == "time" or name not in cols:
                raise WireError("a batch's gaps name a column it does not hold")
            if type(where) is not list or not all(type(i) is int and 0 <= i < n for i in where):
                raise WireError("a batch's gaps are indices of its records")
        self.gpu: dict[int, dict[str, float]] = {}
        for i, sample in gpu.items():
            if not (i.isdecimal() and int(i) < n and type(sample) is dict):
                raise WireError("a batch's gpu samples are objects by record index")
            self.gpu[int(i)] = {
                k: x for k in GPU_FIELDS if (x := from_json_value(sample.get(k))) is not None
            }
        self.run, self.rank, self.n, self.end = run_id, rank, n, bool(head.get("end"))
        self.floats = len(cols) - 1  # float64 columns: time, the system's given, metrics
        self.names = [c[2:] for c in cols if c.startswith("m:")]
        if cols[2 : len(cols) - len(self.names)] != [c for c in SYSTEM if c in cols]:
            raise WireError("a batch's columns are step, time, the system's, then metrics")
        # Where each system field's column is among the float64 ones (None: not given).
        self.system = [cols.index(c) - 1 if c in cols else None for c in SYSTEM]
        self.gaps = [(cols.index(c), where) for c, where in gaps.items()]
        # Each record's metrics as the store's JSON text, by a template of the names
        # (json.dumps's text: ", " and ": "); None where a record may lack one.
        self.template: str | None = None
        if not any(c in gaps for c in cols if c.startswith("m:")):
            fields = (json.dumps(k).replace("%", "%%") + ": %s" for k in self.names)
            self.template = "{" + ", ".join(fields) + "}"


# Headers already checked: a rank's batches mostly repeat theirs (the same columns, n).
_HEADS: dict[bytes, _Head] = {}
_MAX_HEADS = 4096


def _head(raw: bytes, run_id: str) -> _Head:
    head = _HEADS.get(raw)
    if head is not None and head.run == run_id:
        return head
    try:
        parsed = json.loads(raw)
    except ValueError as e:
        raise WireError("a batch's header is not JSON") from e
    head = _Head(parsed, run_id)
    if len(_HEADS) >= _MAX_HEADS:
        _HEADS.clear()
    _HEADS[raw] = head
    return head


def decode(payload: bytes, at: int, run_id: str) -> tuple[int, list[Record], bool]:
    """(rank, records, end) of a payload whose newline is at *at*; WireError if it is not
    one of this run's, or not this format."""
    rank, records, end, _ = read(payload, at, run_id, texts=False)
    return rank, records, end


def read(
    payload: bytes, at: int, run_id: str, texts: bool = True
) -> tuple[int, list[Record], bool, list[str] | None]:
    """``decode``, and each record's metrics as the store's JSON text (*texts*), made a
    column at a time: writing a float as text was the store writer's largest cost of a
    record, and a column of them is written at half the cost of one record's object.
    None (the writer writes them) when a value is not finite (stored as "nan" ...) or a
    record lacks one of the batch's metrics."""
    head = _head(payload[:at], run_id)
    n = head.n
    body = memoryview(payload)[at + 1 :]
    if len(body) != 8 * n * (1 + head.floats):
        raise WireError("a batch's body does not hold its columns")
    steps_a = array("q")
    steps_a.frombytes(body[: 8 * n])
    floats_a = array("d")
    floats_a.frombytes(body[8 * n :])
    if not _LITTLE:
        steps_a.byteswap()
        floats_a.byteswap()
    steps: list[Any] = steps_a.tolist()
    floats: list[Any] = floats_a.tolist()
    for column, where in head.gaps:  # column 0 is the steps, k the float64 column k - 1
        if column:
            start = (column - 1) * n
            for i in where:
                floats[start + i] = None
        else:
            for i in where:
                steps[i] = None
    times = floats[:n]
    none = [None] * n
    system = [none if k is None else floats[k * n : (k + 1) * n] for k in head.system]
    first = head.floats - len(head.names)  # the metrics' columns are the last
    values = [floats[k * n : (k + 1) * n] for k in range(first, head.floats)]
    names = head.names
    text: list[str] | None = None
    if texts and head.template is not None and _finite(values):
        text = _texts(head.template, values, n)
    if not names:
        dicts: Any = (dict() for _ in range(n))
    elif head.template is None:  # some records lack some metrics
        rows = zip(*values, strict=True)
        dicts = ({k: v for k, v in zip(names, vs, strict=True) if v is not None} for vs in rows)
    else:
        dicts = map(dict, map(zip, repeat(names), zip(*values, strict=True)))
    records = list(
        map(Record, repeat(head.rank), steps, times, *system[:3], dicts, repeat(None), *system[3:])
    )
    for i, sample in head.gpu.items():
        records[i].gpu = dict(sample)
    return head.rank, records, head.end, text


def _finite(columns: Any) -> bool:
    """Whether every value of *columns* is finite (a sum is NaN or infinite otherwise; a
    sum too large for a float says no, and the writer checks each value)."""
    total = sum(map(sum, columns), 0.0)
    return total - total == 0.0


def _texts(template: str, columns: list[list[float]], n: int) -> list[str]:
    """Each record's metrics (finite floats) as JSON text, as ``json.dumps`` writes it."""
    if not columns:
        return list(repeat(template, n))
    reprs = [map(float.__repr__, c) for c in columns]
    if len(columns) == 1:
        return list(map(template.__mod__, *reprs))
    return list(map(template.__mod__, zip(*reprs, strict=True)))
