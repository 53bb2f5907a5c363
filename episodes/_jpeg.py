"""Per-frame JPEG through FFmpeg's mjpeg codec: the benchmark's storage baseline."""

from __future__ import annotations

import fractions

import av
import numpy as np
import numpy.typing as npt

from ._h264 import rgb_array
from .errors import DecodeError


def qscale_for_quality(quality: int) -> int:
    """FFmpeg mjpeg quantizer scale approximating an IJG (libjpeg) quality in [1, 100].

    FFmpeg's mjpeg quantizes with the MPEG-1 intra matrix times ``qscale / 8``; at
    ``qscale = 2`` its steps run 4..20, close to IJG quality 90 (steps 2..24).
    """
    if not 1 <= quality <= 100:
        raise ValueError(f"JPEG quality must be in [1, 100], got {quality}")
    return max(1, min(31, round((100 - quality) / 5)))


def encode_jpeg(frames: npt.NDArray[np.uint8], quality: int) -> list[bytes]:
    """Encode each RGB uint8 (H, W, 3) frame of ``frames`` as a standalone JPEG (4:2:0)."""
    count, height, width = frames.shape[:3]
    ctx = av.CodecContext.create("mjpeg", "w")
    ctx.width, ctx.height, ctx.pix_fmt = width, height, "yuvj420p"
    ctx.time_base = fractions.Fraction(1, 30)
    ctx.options = {"flags": "+qscale", "global_quality": str(qscale_for_quality(quality) * 118)}
    out: list[bytes] = []
    for index in range(count):
        frame = av.VideoFrame.from_ndarray(frames[index], format="rgb24").reformat(
            format="yuvj420p"
        )
        frame.pts = index
        out.extend(bytes(p) for p in ctx.encode(frame))
    out.extend(bytes(p) for p in ctx.encode(None))
    return out


def decode_jpeg(data: bytes, topic: str | None = None) -> npt.NDArray[np.uint8]:
    """Decode one JPEG into an RGB uint8 (H, W, 3) frame."""
    ctx = av.CodecContext.create("mjpeg", "r")
    try:
        frames = [rgb_array(f) for f in ctx.decode(av.Packet(data))]
        frames.extend(rgb_array(f) for f in ctx.decode(None))
    except av.FFmpegError as exc:
        raise DecodeError(f"JPEG decode failed: {exc}", topic=topic) from exc
    if len(frames) != 1:
        raise DecodeError(f"JPEG gave {len(frames)} frames", topic=topic)
    return frames[0]
