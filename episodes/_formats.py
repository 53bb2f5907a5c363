"""Message formats of foreign recordings: ROS 2 (CDR) and Foxglove's JSON schemas.

Decoders turn a payload into a message object (a ROS 2 dynamic message, or a dict for JSON);
the helpers here read images, stamps and numeric fields from either, without a ROS install.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import av
import numpy as np
import numpy.typing as npt
from mcap.records import Channel, Schema
from mcap_ros2.decoder import DecoderFactory

from ._h264 import rgb_array
from .errors import DecodeError, SchemaError
from .mapping import FieldStep

Decoder = Callable[[bytes], Any]

ROS_COMPRESSED = "sensor_msgs/msg/CompressedImage"
ROS_RAW = "sensor_msgs/msg/Image"
ROS_JOINT_STATE = "sensor_msgs/msg/JointState"
FOXGLOVE_COMPRESSED = "foxglove.CompressedImage"
FOXGLOVE_RAW = "foxglove.RawImage"
#: Image schemas a camera topic may carry -> whether frames are compressed.
IMAGE_SCHEMAS = {
    ROS_COMPRESSED: True,
    ROS_RAW: False,
    FOXGLOVE_COMPRESSED: True,
    FOXGLOVE_RAW: False,
    "foxglove_msgs/msg/CompressedImage": True,
    "foxglove_msgs/msg/RawImage": False,
}
#: Raw pixel encodings accepted -> (channels, channel order to RGB).
RAW_ENCODINGS = {
    "rgb8": (3, (0, 1, 2)),
    "bgr8": (3, (2, 1, 0)),
    "rgba8": (4, (0, 1, 2)),
    "bgra8": (4, (2, 1, 0)),
    "mono8": (1, (0, 0, 0)),
}
_STILL_CODECS: dict[bytes, Literal["mjpeg", "png"]] = {b"\xff\xd8": "mjpeg", b"\x89P": "png"}


def schema_name(schema: Schema | None) -> str:
    """The schema's type name, with ROS 1 style names (``pkg/Type``) given their ``msg/``."""
    if schema is None:
        return ""
    name = schema.name
    parts = name.split("/")
    return f"{parts[0]}/msg/{parts[1]}" if len(parts) == 2 else name


@dataclass
class Decoders:
    """Payload decoders per channel, built once per recording."""

    ros: DecoderFactory

    @classmethod
    def create(cls) -> Decoders:
        """A fresh set (ROS 2 decoders are compiled per schema and cached)."""
        return cls(DecoderFactory())

    def for_channel(self, channel: Channel, schema: Schema | None) -> Decoder:
        """The decoder of ``channel``; :class:`SchemaError` for an unsupported encoding."""
        if channel.message_encoding == "cdr":
            if schema is None or schema.encoding != "ros2msg":
                raise SchemaError("CDR messages need a ros2msg schema", topic=channel.topic)
            try:
                decoder = self.ros.decoder_for("cdr", schema)
            except Exception as exc:  # the ROS 2 schema parser raises assorted types
                raise SchemaError(f"bad ROS 2 schema: {exc}", topic=channel.topic) from exc
            if decoder is None:
                raise SchemaError("no ROS 2 decoder for the schema", topic=channel.topic)
            return decoder
        if channel.message_encoding == "json":
            return json.loads
        raise SchemaError(
            f"message encoding {channel.message_encoding!r} is not supported (ROS 2 cdr or JSON)",
            topic=channel.topic,
        )


def value(message: Any, name: str) -> Any:
    """Field ``name`` of a decoded message (dict or object); ``KeyError`` when absent."""
    if isinstance(message, dict):
        return message[name]
    if not hasattr(message, name):
        raise KeyError(name)
    return getattr(message, name)


def stamp_ns(message: Any) -> int | None:
    """The message's own capture time (integer ns since the epoch), or ``None`` when it has
    none or it is zero: ROS ``header.stamp`` (sec, nanosec), Foxglove ``timestamp`` (sec, nsec)."""
    try:
        if isinstance(message, dict):
            stamp = message.get("timestamp")
            seconds, nanos = (stamp["sec"], stamp["nsec"]) if stamp else (0, 0)
        else:
            stamp = value(value(message, "header"), "stamp")
            seconds, nanos = value(stamp, "sec"), value(stamp, "nanosec")
    except (KeyError, TypeError):
        return None
    total = int(seconds) * 1_000_000_000 + int(nanos)
    return total or None


def resolve(message: Any, steps: tuple[FieldStep, ...]) -> Any:
    """Follow a field path into a decoded message; ``KeyError``/``IndexError`` when absent."""
    current = message
    for step in steps:
        current = value(current, step.name)
        if step.sliced:
            current = list(current)[step.start : step.stop]
        elif step.start is not None:
            current = list(current)[step.start]
    return current


def numbers(raw: Any) -> npt.NDArray[np.float32]:
    """A number, bool or sequence of numbers as a float32 vector; ``TypeError`` otherwise."""
    if isinstance(raw, bool | int | float):
        return np.array([float(raw)], dtype=np.float32)
    if isinstance(raw, str | bytes | dict):
        raise TypeError(f"{type(raw).__name__} is not numeric")
    array = np.asarray(raw)
    if array.ndim != 1 or array.dtype.kind not in "biuf":
        raise TypeError(f"not a flat numeric sequence (dtype {array.dtype}, {array.ndim}-d)")
    return array.astype(np.float32)


def image_rgb(message: Any, compressed: bool) -> npt.NDArray[np.uint8]:
    """An image message as RGB uint8 (H, W, 3).

    :class:`DecodeError` when the pixels are damaged; :class:`SchemaError` when the message
    lacks image fields or uses a pixel encoding outside :data:`RAW_ENCODINGS`.
    """
    try:
        data = value(message, "data")
        if isinstance(data, str):  # JSON carries bytes as base64
            data = base64.b64decode(data, validate=True)
        if compressed:
            return decode_still(bytes(data))
        width, height = int(value(message, "width")), int(value(message, "height"))
        encoding, step = str(value(message, "encoding")), int(value(message, "step"))
    except (KeyError, TypeError) as exc:
        raise SchemaError(f"not an image message: missing {exc}") from exc
    except ValueError as exc:
        raise DecodeError(f"image data is not valid base64: {exc}") from exc
    return raw_rgb(bytes(data), width, height, encoding, step)


def raw_rgb(
    data: bytes, width: int, height: int, encoding: str, step: int
) -> npt.NDArray[np.uint8]:
    """Uncompressed pixels (rows ``step`` bytes apart) as RGB uint8 (H, W, 3)."""
    if encoding not in RAW_ENCODINGS:
        raise SchemaError(
            f"pixel encoding {encoding!r} not supported ({sorted(RAW_ENCODINGS)}); "
            "a mapping that lists the cameras leaves other image topics out"
        )
    channels, order = RAW_ENCODINGS[encoding]
    if step < width * channels or len(data) < step * height or width <= 0 or height <= 0:
        raise DecodeError(f"{len(data)} bytes do not hold a {width}x{height} {encoding} image")
    rows = np.frombuffer(data, dtype=np.uint8, count=step * height).reshape(height, step)
    pixels = rows[:, : width * channels].reshape(height, width, channels)
    return np.ascontiguousarray(pixels[:, :, list(order)])


def decode_still(data: bytes) -> npt.NDArray[np.uint8]:
    """Decode one JPEG or PNG (recognised by its magic bytes) into RGB uint8 (H, W, 3)."""
    codec = _STILL_CODECS.get(data[:2])
    if codec is None:
        raise DecodeError("compressed image is neither JPEG nor PNG")
    ctx = av.CodecContext.create(codec, "r")
    try:
        frames = [rgb_array(f) for f in ctx.decode(av.Packet(data))]
        frames.extend(rgb_array(f) for f in ctx.decode(None))
    except av.FFmpegError as exc:
        raise DecodeError(f"{codec} decode failed: {exc}") from exc
    if len(frames) != 1:
        raise DecodeError(f"compressed image gave {len(frames)} frames")
    return frames[0]
