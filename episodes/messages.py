"""Message encodings of Quarry containers.

Two message encodings, each a fixed little-endian binary header followed by a payload:

``quarry.frame.v1`` (camera topics), header ``<qIHHBB2x`` (20 bytes): capture time
(int64 nanoseconds), frame index in the episode (uint32), width, height (uint16 pixels),
codec (1 = H.264 Annex B access unit, 2 = JPEG), flags (bit 0: keyframe); payload: the
encoded frame.

``quarry.vector.v1`` (state and action topics), header ``<qH2x`` (12 bytes): sample time
(int64 nanoseconds), dimension count D (uint16); payload: D little-endian float32 values.

``quarry.vectors.v1`` (window arrays: one message per vector topic per window, see
``episodes.layouts``), header ``<qqIHH`` (24 bytes): span start and end (int64 ns, the rows
are every sample of the topic with a time in ``[start, end)``), row count N (uint32),
dimension count D (uint16), reserved (uint16, 0); then N int64 sample times (ns), N uint32
sequence numbers (the samples' own messages' ``sequence``), and N x D float32 values, row by
row; all little-endian, rows in (time, sequence) order.

Each channel's schema (encoding ``quarry.json``) is a JSON object naming the type and, for
vectors and window arrays, the dimension names; for frames, the codec and size; each also
spells out its binary layout, so other tools can decode the messages from the file alone.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import SchemaError

FRAME_ENCODING = "quarry.frame.v1"
VECTOR_ENCODING = "quarry.vector.v1"
WINDOW_ENCODING = "quarry.vectors.v1"
SCHEMA_ENCODING = "quarry.json"
FRAME_SCHEMA = "quarry.Frame"
VECTOR_SCHEMA = "quarry.Vector"
WINDOW_SCHEMA = "quarry.VectorWindow"
CODEC_H264 = 1
CODEC_JPEG = 2
CODECS = {"h264": CODEC_H264, "jpeg": CODEC_JPEG}
FLAG_KEYFRAME = 1

_FRAME = struct.Struct("<qIHHBB2x")
_VECTOR = struct.Struct("<qH2x")
_WINDOW = struct.Struct("<qqIHH")


@dataclass(frozen=True)
class FrameHeader:
    """Decoded header of a frame message (times in integer nanoseconds)."""

    time_ns: int
    index: int
    width: int
    height: int
    codec: int
    keyframe: bool


def pack_frame(header: FrameHeader, data: bytes) -> bytes:
    """Serialize a frame message."""
    flags = FLAG_KEYFRAME if header.keyframe else 0
    head = _FRAME.pack(
        header.time_ns, header.index, header.width, header.height, header.codec, flags
    )
    return head + data


def unpack_frame(message: bytes, topic: str | None = None) -> tuple[FrameHeader, bytes]:
    """Parse a frame message into its header and encoded frame bytes."""
    if len(message) < _FRAME.size:
        raise SchemaError(f"frame message of {len(message)} bytes is too short", topic=topic)
    time_ns, index, width, height, codec, flags = _FRAME.unpack_from(message)
    header = FrameHeader(time_ns, index, width, height, codec, bool(flags & FLAG_KEYFRAME))
    return header, message[_FRAME.size :]


def pack_vector(time_ns: int, values: npt.NDArray[np.float32]) -> bytes:
    """Serialize one vector sample."""
    return _VECTOR.pack(time_ns, len(values)) + values.astype("<f4").tobytes()


def unpack_vectors(
    messages: list[bytes], dims: int, topic: str | None = None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Parse vector messages of ``dims`` values into times (N,) and float32 values (N, dims)."""
    size = _VECTOR.size + 4 * dims
    for message in messages:
        if len(message) != size:
            raise SchemaError(
                f"vector message of {len(message)} bytes, expected {size}", topic=topic
            )
    rows = np.frombuffer(b"".join(messages), dtype=np.uint8).reshape(len(messages), size)
    counts = rows[:, 8:10].copy().view("<u2")[:, 0]
    if len(messages) and np.any(counts != dims):
        raise SchemaError(f"vector of {int(counts.max())} values, schema says {dims}", topic=topic)
    times = rows[:, :8].copy().view("<i8")[:, 0].astype(np.int64)
    values = rows[:, _VECTOR.size :].copy().view("<f4").astype(np.float32)
    return times, values.reshape(len(messages), dims)


@dataclass(frozen=True)
class VectorWindow:
    """One window array: every sample of a topic with a time in ``[span_start_ns,
    span_end_ns)``, in (time, sequence) order; times (N,) int64 ns, sequences (N,) uint32,
    values (N, D) float32 (read-only views of the message)."""

    span_start_ns: int
    span_end_ns: int
    times: npt.NDArray[np.int64]
    sequences: npt.NDArray[np.uint32]
    values: npt.NDArray[np.float32]


def pack_window(
    span_start_ns: int,
    span_end_ns: int,
    times: npt.NDArray[np.int64],
    sequences: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
) -> bytes:
    """Serialize a window array (rows already in (time, sequence) order)."""
    rows, dims = values.shape
    return b"".join(
        (
            _WINDOW.pack(span_start_ns, span_end_ns, rows, dims, 0),
            times.astype("<i8").tobytes(),
            sequences.astype("<u4").tobytes(),
            values.astype("<f4").tobytes(),
        )
    )


def unpack_window(message: bytes, dims: int, topic: str, window: int) -> VectorWindow:
    """Parse a window array of ``dims`` values a row; :class:`SchemaError` naming the topic
    and the window when its shape, its length or its times do not fit."""
    where = f"window {window} array"
    if len(message) < _WINDOW.size:
        raise SchemaError(
            f"{where} of {len(message)} bytes is shorter than its header", topic=topic
        )
    start, end, rows, found, _ = _WINDOW.unpack_from(message)
    if found != dims:
        raise SchemaError(f"{where} has {found} values a row, the schema says {dims}", topic=topic)
    need = _WINDOW.size + rows * (8 + 4 + 4 * dims)
    if len(message) != need:
        raise SchemaError(
            f"{where} of {rows} rows x {dims} values with their times and sequences needs "
            f"{need} bytes, got {len(message)}",
            topic=topic,
        )
    times = np.frombuffer(message, "<i8", rows, _WINDOW.size)
    sequences = np.frombuffer(message, "<u4", rows, _WINDOW.size + 8 * rows)
    values = np.frombuffer(message, "<f4", rows * dims, _WINDOW.size + 12 * rows)
    if rows > 1 and bool((times[1:] < times[:-1]).any()):
        raise SchemaError(f"{where} has times out of order", topic=topic)
    if rows and (times[0] < start or times[-1] >= end):
        raise SchemaError(f"{where} has times outside its span [{start}, {end})", topic=topic)
    return VectorWindow(start, end, times, sequences, values.reshape(rows, dims))


def frame_schema(codec: str, width: int, height: int) -> bytes:
    """Schema data of a camera channel."""
    body = {
        "type": "frame",
        "codec": codec,
        "width": width,
        "height": height,
        "header": "<qIHHBB2x",
    }
    return json.dumps(body, sort_keys=True).encode()


def vector_schema(names: tuple[str, ...]) -> bytes:
    """Schema data of a vector channel."""
    body = {"type": "vector", "dtype": "float32", "names": list(names), "header": "<qH2x"}
    return json.dumps(body, sort_keys=True).encode()


def window_schema(names: tuple[str, ...]) -> bytes:
    """Schema data of a window array channel (the layout spelled out for other tools)."""
    body = {
        "type": "vector_window",
        "dtype": "float32",
        "names": list(names),
        "header": "<qqIHH",
        "header_fields": ["span_start_ns", "span_end_ns", "rows", "dims", "reserved"],
        "body": ["rows x <i8 time_ns", "rows x <u4 sequence", "rows x dims <f4 values"],
    }
    return json.dumps(body, sort_keys=True).encode()


def parse_schema(data: bytes, expected_type: str, topic: str | None = None) -> dict[str, Any]:
    """Parse and check a channel's JSON schema; :class:`SchemaError` when it does not fit."""
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SchemaError(f"schema is not JSON: {exc}", topic=topic) from exc
    if not isinstance(body, dict) or body.get("type") != expected_type:
        raise SchemaError(f"schema is not a {expected_type} schema", topic=topic)
    if expected_type in ("vector", "vector_window") and not isinstance(body.get("names"), list):
        raise SchemaError("vector schema lacks dimension names", topic=topic)
    if expected_type == "frame" and body.get("codec") not in CODECS:
        raise SchemaError(f"unknown frame codec {body.get('codec')!r}", topic=topic)
    return body
