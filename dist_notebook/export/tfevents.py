"""A TensorBoard event file written directly: scalars and text, nothing else.

TensorBoard reads a directory of ``events.out.tfevents.*`` files: TFRecord framing (a
little-endian length, its masked CRC-32C, the payload, the payload's masked CRC-32C)
around serialized ``Event`` protocol buffers. We encode the few messages we need by hand
(``Event``, ``Summary.Value`` with ``simple_value`` for scalars, a string tensor with the
``text`` plugin's metadata for text), because TensorBoard's own writer costs ~0.5 ms per
scalar (a protobuf object per value, a pure-Python CRC, a 10-slot queue) and this one
~10 us per record with all of its values in one event (bench/export_overhead.py). The
field numbers are TensorBoard's (tensorboard/compat/proto/event.proto, summary.proto,
tensor.proto); tests read the files back with TensorBoard's own EventAccumulator.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from collections.abc import Iterable
from pathlib import Path

import google_crc32c

_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_FLOAT_MAX = 3.4028234663852886e38
_DT_STRING = 7  # tensorflow DataType
_files = itertools.count()


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 fields: negative numbers as two's complement
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(key: int, payload: bytes) -> bytes:
    """A length-delimited field (*key* is the field number shifted, with wire type 2)."""
    return bytes((key,)) + _varint(len(payload)) + payload


def _float32(value: float) -> bytes:
    # simple_value is a 32-bit float: beyond its range a value is infinite, as in numpy.
    if value != value or -_FLOAT_MAX <= value <= _FLOAT_MAX:
        return _FLOAT.pack(value)
    return _FLOAT.pack(float("inf") if value > 0 else float("-inf"))


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(payload: bytes) -> bytes:
    """One TFRecord: length, masked CRC of the length, payload, masked CRC of the payload."""
    header = _LENGTH.pack(len(payload))
    return header + _CRC.pack(_masked_crc(header)) + payload + _CRC.pack(_masked_crc(payload))


def event(wall_time: float, step: int, summary_values: bytes = b"", version: str = "") -> bytes:
    """An ``Event``: wall_time (1), step (2), file_version (3) or a summary (5)."""
    out = b"\x09" + _DOUBLE.pack(wall_time) + b"\x10" + _varint(step)
    if version:
        out += _field(0x1A, version.encode())
    if summary_values:
        out += _field(0x2A, summary_values)
    return out


class _ScalarPrefix(dict[str, bytes]):
    """Per tag, the encoded ``Summary.value`` entry up to its float (tags repeat)."""

    def __missing__(self, tag: str) -> bytes:
        name = _field(0x0A, tag.encode())  # Value.tag (1)
        prefix = b"\x0a" + _varint(len(name) + 5) + name + b"\x15"  # then simple_value (2)
        self[tag] = prefix
        return prefix


_TEXT_METADATA = _field(0x4A, _field(0x0A, _field(0x0A, b"text")))  # plugin_data.plugin_name


def scalar_values(values: Iterable[tuple[str, float]], prefixes: _ScalarPrefix) -> bytes:
    return b"".join(prefixes[tag] + _float32(value) for tag, value in values)


def text_value(tag: str, text: str) -> bytes:
    """A ``Summary.value`` holding *text* as the text plugin reads it (a string tensor)."""
    tensor = b"\x08" + _varint(_DT_STRING) + b"\x12\x00" + _field(0x42, text.encode())
    value = _field(0x0A, tag.encode()) + _TEXT_METADATA + _field(0x42, tensor)
    return _field(0x0A, value)


class EventFile:
    """One event file in *directory* (created if missing), buffered; flush() makes what
    was written visible to a TensorBoard that watches the directory."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{next(_files)}"
        )
        self.path = directory / name
        self._file = open(self.path, "xb")  # closed by close()
        self._prefixes = _ScalarPrefix()
        self._file.write(frame(event(time.time(), 0, version="brain.Event:2")))

    def scalars(self, step: int, wall_time: float, values: Iterable[tuple[str, float]]) -> None:
        """One event holding every value of one record (one point per tag at *step*)."""
        summary = scalar_values(values, self._prefixes)
        if summary:
            self._file.write(frame(event(wall_time, step, summary)))

    def text(self, tag: str, text: str, step: int = 0, wall_time: float | None = None) -> None:
        when = time.time() if wall_time is None else wall_time
        self._file.write(frame(event(when, step, text_value(tag, text))))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
