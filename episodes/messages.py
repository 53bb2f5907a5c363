"""Message encodings of Quarry containers.

Two message encodings, each a fixed little-endian binary header followed by a payload:

``quarry.frame.v1`` (camera topics), header ``<qIHHBB2x`` (20 bytes): capture time
(int64 nanoseconds), frame index in the episode (uint32), width, height (uint16 pixels),
codec (1 = H.264 Annex B access unit, 2 = JPEG), flags (bit 0: keyframe); payload: the
encoded frame.

``quarry.vector.v1`` (state and action topics), header ``<qH2x`` (12 bytes): sample time
(int64 nanoseconds), dimension count D (uint16); payload: D little-endian float32 values.

Each channel's schema (encoding ``quarry.json``) is a JSON object naming the type and, for
vectors, the dimension names; for frames, the codec and size.
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
SCHEMA_ENCODING = "quarry.json"
FRAME_SCHEMA = "quarry.Frame"
VECTOR_SCHEMA = "quarry.Vector"
CODEC_H264 = 1
CODEC_JPEG = 2
CODECS = {"h264": CODEC_H264, "jpeg": CODEC_JPEG}
FLAG_KEYFRAME = 1

_FRAME = struct.Struct("<qIHHBB2x")
_VECTOR = struct.Struct("<qH2x")


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


def parse_schema(data: bytes, expected_type: str, topic: str | None = None) -> dict[str, Any]:
    """Parse and check a channel's JSON schema; :class:`SchemaError` when it does not fit."""
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SchemaError(f"schema is not JSON: {exc}", topic=topic) from exc
    if not isinstance(body, dict) or body.get("type") != expected_type:
        raise SchemaError(f"schema is not a {expected_type} schema", topic=topic)
    if expected_type == "vector" and not isinstance(body.get("names"), list):
        raise SchemaError("vector schema lacks dimension names", topic=topic)
    if expected_type == "frame" and body.get("codec") not in CODECS:
        raise SchemaError(f"unknown frame codec {body.get('codec')!r}", topic=topic)
    return body
