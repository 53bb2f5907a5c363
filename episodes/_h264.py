"""H.264 encode and decode through PyAV (libx264 to write, FFmpeg's h264 decoder to read)."""

from __future__ import annotations

import fractions
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import av
import numpy as np
import numpy.typing as npt
from av.video.reformatter import VideoReformatter

from .errors import DecodeError, InputError

#: libx264's tunes (``x264 --fullhelp``).
TUNES = ("film", "animation", "grain", "stillimage", "psnr", "ssim", "fastdecode", "zerolatency")


@dataclass(frozen=True)
class VideoConfig:
    """Encoder settings for camera topics.

    :param codec: ``h264`` (the Quarry layout) or ``jpeg`` (per-frame, benchmark baseline).
    :param crf: libx264 constant rate factor (lower is better quality, larger files). 23,
        libx264's own default: on the peer benchmark's synthetic rigs it keeps luma PSNR at
        36.6-37.6 dB in 0.50-0.77x the bytes of CRF 20 (docs/benchmarks.md).
    :param preset: libx264 speed preset.
    :param jpeg_quality: JPEG quality (1-100) of the per-frame baseline.
    :param keyframe_s: seconds between H.264 keyframes inside a window (a keyframe also
        starts every window); ``None`` puts one only at each window's start. A sample decodes
        from the last keyframe at/before its oldest frame, so a shorter interval decodes
        fewer frames per sample and costs bytes.
    :param tune: libx264 tune; ``fastdecode`` (CAVLC instead of CABAC, no deblocking or
        weighted prediction) decodes 1.9x faster at 320x180 and 2.6x at 640x480 for 11% and
        20% more bytes at the same luma PSNR (a training set is decoded far more often than
        it is written); ``None`` for x264's own. One of :data:`TUNES`.
    """

    codec: str = "h264"
    crf: int = 23
    preset: str = "veryfast"
    jpeg_quality: int = 90
    keyframe_s: float | None = None
    tune: str | None = "fastdecode"

    def __post_init__(self) -> None:
        if self.tune is not None and self.tune not in TUNES:
            raise InputError(f"tune must be one of {', '.join(TUNES)} or None, got {self.tune!r}")

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (recorded in the container's layout metadata; ``keyframe_s`` and
        ``tune`` only when set)."""
        out: dict[str, object] = {
            "codec": self.codec,
            "crf": self.crf,
            "preset": self.preset,
            "jpeg_quality": self.jpeg_quality,
        }
        if self.keyframe_s is not None:
            out["keyframe_s"] = self.keyframe_s
        if self.tune is not None:
            out["tune"] = self.tune
        return out


def encode_h264(
    frames: npt.NDArray[np.uint8],
    fps: float,
    keyframes: npt.NDArray[np.bool_],
    gop: int,
    config: VideoConfig,
) -> list[tuple[bytes, bool]]:
    """Encode RGB frames (N, H, W, 3) into one Annex B access unit per frame.

    Frames where ``keyframes`` is set are forced to IDR frames, so decoding can start there;
    ``bf=0`` keeps decode order equal to capture order and ``sc_threshold=0`` stops the
    encoder adding scene-cut keyframes. Returns ``(access unit, is_keyframe)`` per frame.
    """
    count, height, width = frames.shape[:3]
    ctx = av.CodecContext.create("libx264", "w")
    ctx.width, ctx.height, ctx.pix_fmt = width, height, "yuv420p"
    rate = fractions.Fraction(fps).limit_denominator(1001)
    ctx.time_base, ctx.framerate = 1 / rate, rate
    ctx.gop_size, ctx.max_b_frames, ctx.thread_count = gop, 0, 1
    ctx.options = {
        "preset": config.preset,
        "crf": str(config.crf),
        "bf": "0",
        "sc_threshold": "0",
        "g": str(gop),
        "keyint_min": str(gop),
        "forced-idr": "1",
    }
    if config.tune is not None:
        ctx.options = {**ctx.options, "tune": config.tune}
    packets: list[tuple[bytes, bool]] = []
    for index in range(count):
        frame = av.VideoFrame.from_ndarray(frames[index], format="rgb24").reformat(format="yuv420p")
        frame.pts = index
        if keyframes[index]:
            frame.pict_type = av.video.frame.PictureType.I
        packets.extend((bytes(p), bool(p.is_keyframe)) for p in ctx.encode(frame))
    packets.extend((bytes(p), bool(p.is_keyframe)) for p in ctx.encode(None))
    if len(packets) != count:
        raise DecodeError(f"encoder returned {len(packets)} packets for {count} frames")
    return packets


def decode_h264(
    units: Sequence[bytes], topic: str | None = None, keep: Collection[int] | None = None
) -> list[npt.NDArray[np.uint8] | None]:
    """Decode access units (starting at a keyframe) into RGB uint8 (H, W, 3) frames, in order.

    Only frames whose position is in ``keep`` (all when ``None``) are converted to RGB; the
    others come back as ``None``.
    """
    ctx = av.CodecContext.create("h264", "r")
    ctx.thread_count = 1
    out: list[npt.NDArray[np.uint8] | None] = []

    def collect(frames: list[av.VideoFrame]) -> None:
        for frame in frames:
            wanted = keep is None or len(out) in keep
            out.append(rgb_array(frame) if wanted else None)

    try:
        for unit in units:
            collect(ctx.decode(av.Packet(unit)))
        collect(ctx.decode(None))
    except av.FFmpegError as exc:
        raise DecodeError(f"H.264 decode failed: {exc}", topic=topic) from exc
    if len(out) != len(units):
        raise DecodeError(f"decoded {len(out)} frames from {len(units)} units", topic=topic)
    return out


class _Converters(threading.local):
    """One swscale context per thread, kept across frames and calls."""

    def __init__(self) -> None:
        self.rgb = VideoReformatter()


_CONVERTERS = _Converters()


def rgb_array(frame: av.VideoFrame) -> npt.NDArray[np.uint8]:
    """A decoded frame as an RGB uint8 (H, W, 3) array.

    ``frame.to_ndarray(format="rgb24")`` builds a new swscale context for every frame, with a
    thread pool sized to the machine (``threads=0``): about 0.25 ms for a 128x96 frame on two
    busy cores, ten times the conversion itself. This thread's reformatter keeps one
    single-threaded context (swscale reuses it while size and format stay the same), and no
    thread pool exists to be copied into a forked DataLoader worker. The pixels are the same.
    """
    rgb = _CONVERTERS.rgb.reformat(frame, format="rgb24", threads=1)
    return np.asarray(rgb.to_ndarray(), dtype=np.uint8)
