"""Decode an episode's span of a LeRobot video file with PyAV (AV1, H.264, any FFmpeg codec).

An episode's frames are those whose presentation time lies in ``[from_s, to_s)`` of the file
(lerobot concatenates episodes in one file and records each one's span), compared at half a
frame period so that rounding of the stored timestamps does not move a frame across a border.
"""

from __future__ import annotations

from typing import BinaryIO

import av
import numpy as np
import numpy.typing as npt

from episodes.errors import DecodeError


def decode_span(
    stream: BinaryIO, from_s: float, to_s: float, fps: float, *, name: str
) -> npt.NDArray[np.uint8]:
    """RGB frames (N, H, W, 3) of the video in ``stream`` (seekable; read by range, from a
    keyframe before ``from_s`` on) shown in ``[from_s, to_s)`` seconds.

    :raises DecodeError: the file does not open or a frame does not decode (``name`` is the
        file named in the error).
    """
    half = 0.5 / fps
    frames: list[npt.NDArray[np.uint8]] = []
    try:
        with av.open(stream, mode="r") as container:
            video = container.streams.video[0]
            if from_s > half and video.time_base is not None:
                container.seek(int((from_s - half) / video.time_base), stream=video, backward=True)
            for frame in container.decode(video):
                if frame.pts is None or frame.time is None:
                    continue
                if frame.time >= to_s - half:
                    break
                if frame.time >= from_s - half:
                    frames.append(np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8))
    except (av.error.FFmpegError, IndexError) as error:
        raise DecodeError(f"video does not decode: {error}", file=name) from None
    if not frames:
        return np.zeros((0, 0, 0, 3), dtype=np.uint8)
    return np.stack(frames)
