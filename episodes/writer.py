"""Write an episode into an MCAP container in Quarry's layout (or a benchmark layout)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from mcap.writer import CompressionType, Writer

from . import messages as msg
from ._h264 import VideoConfig, encode_h264
from ._jpeg import encode_jpeg
from .episode import CameraStream, EpisodeData, VectorStream
from .errors import InputError
from .info import FORMAT, METADATA_NAME
from .layouts import (
    CAMERA_GROUP,
    DEFAULT_CHUNK_BYTES,
    STATE_GROUP,
    Layout,
    Pending,
    context_topic,
    plan_chunks,
    window_topic,
)

PROFILE = "quarry"


@dataclass(frozen=True)
class WriteOptions:
    """Container layout settings.

    :param layout: chunk layout; ``grouped`` is Quarry's, the others are benchmark baselines.
    :param window_s: window length W in seconds; a multiple of every camera's frame period.
    :param video: camera codec settings.
    :param context_s: seconds of state and action messages before and after each window that
        its chunk also carries (copies, on context channels), so that a sample's state
        history and action horizon up to that long never need the neighbouring window's
        chunk; 0 writes none. The default covers the default sample spec's 0.64 s horizon
        (32 steps at 50 Hz) and its neighbours. The interleaved layout never has any.
    :param vector_arrays: also write, for each vector topic and window, one window array (on
        the topic's window channel) holding the window's samples and their context, which a
        sample parses as one array; the context then lives in the arrays and no context
        copies are written. ``False`` writes the layout of containers before window arrays.
        The interleaved layout never has any.
    """

    layout: Layout = Layout.GROUPED
    window_s: float = 2.0
    video: VideoConfig = field(default_factory=VideoConfig)
    context_s: float = 0.7
    vector_arrays: bool = True

    @property
    def window_ns(self) -> int:
        """Window length, integer nanoseconds."""
        return round(self.window_s * 1e9)

    @property
    def context_ns(self) -> int:
        """Context carried on each side of a window, integer nanoseconds (0 when interleaved)."""
        if self.layout is Layout.INTERLEAVED:
            return 0
        return round(self.context_s * 1e9)

    @property
    def arrays(self) -> bool:
        """Whether window arrays are written (never in the interleaved layout)."""
        return self.vector_arrays and self.layout is not Layout.INTERLEAVED

    @property
    def copies_ns(self) -> int:
        """Context carried as per-step copies on context channels (0 with window arrays)."""
        return 0 if self.arrays else self.context_ns


def write_episode(
    episode: EpisodeData, dest: str | os.PathLike[str] | IO[bytes], options: WriteOptions
) -> None:
    """Write ``episode`` to ``dest`` (a path or a writable binary stream)."""
    episode.validate()
    if isinstance(dest, str | os.PathLike):
        with Path(dest).open("wb") as stream:
            _write(episode, stream, options)
    else:
        _write(episode, dest, options)


def _write(episode: EpisodeData, stream: IO[bytes], options: WriteOptions) -> None:
    topics = [c.topic for c in episode.cameras] + [v.topic for v in episode.vectors]
    interleaved = options.layout is Layout.INTERLEAVED
    writer = Writer(
        stream,
        chunk_size=DEFAULT_CHUNK_BYTES if interleaved else 2**62,
        compression=CompressionType.ZSTD,
    )
    writer.start(profile=PROFILE, library=FORMAT)
    channels = _register_channels(writer, episode, options)
    writer.add_metadata(METADATA_NAME, container_metadata(episode, options))
    pending = [m for cam in episode.cameras for m in _camera_messages(episode, cam, options)]
    pending += [m for vec in episode.vectors for m in _vector_messages(vec)]
    if options.arrays:
        pending += [m for vec in episode.vectors for m in _window_arrays(episode, vec, options)]
    chunks = plan_chunks(
        pending, options.layout, episode.start_ns, options.window_ns, topics, options.copies_ns
    )
    for chunk in chunks:
        for m in chunk:
            writer.add_message(channels[m.topic], m.time_ns, m.data, m.time_ns, m.sequence)
        if not interleaved:
            writer.flush()  # type: ignore[no-untyped-call]
    writer.finish()  # type: ignore[no-untyped-call]


def _register_channels(
    writer: Writer, episode: EpisodeData, options: WriteOptions
) -> dict[str, int]:
    channels: dict[str, int] = {}
    for cam in episode.cameras:
        data = msg.frame_schema(options.video.codec, cam.width, cam.height)
        schema = writer.register_schema(msg.FRAME_SCHEMA, msg.SCHEMA_ENCODING, data)
        meta = {"kind": "camera", "group": CAMERA_GROUP, "rate_hz": repr(float(cam.fps))}
        channels[cam.topic] = writer.register_channel(cam.topic, msg.FRAME_ENCODING, schema, meta)
    for vec in episode.vectors:
        schema = writer.register_schema(
            msg.VECTOR_SCHEMA, msg.SCHEMA_ENCODING, msg.vector_schema(vec.names)
        )
        meta = {"kind": vec.kind, "group": STATE_GROUP, "rate_hz": repr(float(vec.rate_hz))}
        channels[vec.topic] = writer.register_channel(vec.topic, msg.VECTOR_ENCODING, schema, meta)
        if options.arrays:
            array = writer.register_schema(
                msg.WINDOW_SCHEMA, msg.SCHEMA_ENCODING, msg.window_schema(vec.names)
            )
            window = {**meta, "kind": "window", "window_of": vec.topic}
            channels[window_topic(vec.topic)] = writer.register_channel(
                window_topic(vec.topic), msg.WINDOW_ENCODING, array, window
            )
        if options.copies_ns > 0:
            context = {**meta, "kind": "context", "context_of": vec.topic}
            channels[context_topic(vec.topic)] = writer.register_channel(
                context_topic(vec.topic), msg.VECTOR_ENCODING, schema, context
            )
    return channels


def _camera_messages(
    episode: EpisodeData, cam: CameraStream, options: WriteOptions
) -> list[Pending]:
    gop = _frames_per_window(cam, options)
    windows = (cam.timestamps_ns - episode.start_ns) // options.window_ns
    keyframes = np.ones(len(windows), dtype=bool)
    keyframes[1:] = windows[1:] != windows[:-1]
    if options.video.keyframe_s is not None:
        gop = min(gop, _keyframe_frames(cam, options.video.keyframe_s))
        starts = np.maximum.accumulate(np.where(keyframes, np.arange(len(windows)), 0))
        keyframes |= (np.arange(len(windows)) - starts) % gop == 0
    if options.video.codec == "h264":
        units = encode_h264(cam.frames, cam.fps, keyframes, gop, options.video)
    elif options.video.codec == "jpeg":
        units = [(data, True) for data in encode_jpeg(cam.frames, options.video.jpeg_quality)]
    else:
        raise InputError(f"unknown video codec {options.video.codec!r}", topic=cam.topic)
    codec = msg.CODECS[options.video.codec]
    out = []
    for index, (time_ns, (unit, key)) in enumerate(zip(cam.timestamps_ns, units, strict=True)):
        header = msg.FrameHeader(int(time_ns), index, cam.width, cam.height, codec, key)
        out.append(
            Pending(int(time_ns), cam.topic, CAMERA_GROUP, index, msg.pack_frame(header, unit))
        )
    return out


def _vector_messages(vec: VectorStream) -> list[Pending]:
    values = vec.values.astype(np.float32, copy=False)
    return [
        Pending(int(t), vec.topic, STATE_GROUP, i, msg.pack_vector(int(t), values[i]))
        for i, t in enumerate(vec.timestamps_ns)
    ]


def _window_arrays(episode: EpisodeData, vec: VectorStream, options: WriteOptions) -> list[Pending]:
    """One window array per window of the episode (empty ones too, so every window has one):
    the topic's samples from ``context_ns`` before the window to ``context_ns`` after it, in
    (time, sequence) order, as a message at the window's start time."""
    order = np.lexsort((np.arange(len(vec.timestamps_ns)), vec.timestamps_ns))
    times = vec.timestamps_ns[order].astype(np.int64)
    values = vec.values.astype(np.float32, copy=False)[order]
    window, context = options.window_ns, options.context_ns
    count = -(-(episode.end_ns - episode.start_ns) // window)
    out = []
    for k in range(count):
        at = episode.start_ns + k * window
        lo, hi = at - context, at + window + context
        first, last = np.searchsorted(times, [lo, hi], side="left")
        data = msg.pack_window(lo, hi, times[first:last], order[first:last], values[first:last])
        out.append(Pending(at, window_topic(vec.topic), STATE_GROUP, k, data))
    return out


def _keyframe_frames(cam: CameraStream, keyframe_s: float) -> int:
    """Frames between keyframes inside a window: ``keyframe_s`` at the camera's rate."""
    if not keyframe_s > 0:
        raise InputError(f"keyframe_s must be positive, got {keyframe_s!r}", topic=cam.topic)
    return max(1, round(keyframe_s * cam.fps))


def _frames_per_window(cam: CameraStream, options: WriteOptions) -> int:
    frames = options.window_s * cam.fps
    if abs(frames - round(frames)) > 1e-6 or round(frames) < 1:
        raise InputError(
            f"window of {options.window_s} s is not a multiple of the frame period "
            f"of a {cam.fps} Hz camera",
            topic=cam.topic,
        )
    return round(frames)


def container_metadata(episode: EpisodeData, options: WriteOptions) -> dict[str, str]:
    """The metadata record: episode description, stamps, topics with rates, and the layout."""
    description: dict[str, Any] = {
        "episode_id": episode.episode_id,
        "robot_id": episode.robot_id,
        "robot_model": episode.robot_model,
        "task_id": episode.task_id,
        "task_description": episode.task_description,
        "site": episode.site,
        "operator": episode.operator,
        "start_ns": episode.start_ns,
        "end_ns": episode.end_ns,
        "control_hz": episode.control_hz,
        "steps": episode.steps,
        "success": episode.success,
        "extra": episode.extra,
    }
    if episode.instruction:  # absent otherwise, so containers without one keep their bytes
        description["instruction"] = episode.instruction
    stamps = {
        "schema_version": episode.stamps.schema_version,
        "pipeline_version": episode.stamps.pipeline_version,
        "robot_sw_version": episode.stamps.robot_sw_version,
    }
    layout = {
        "layout": str(options.layout),
        "window_ns": options.window_ns,
        "groups": {
            CAMERA_GROUP: [c.topic for c in episode.cameras],
            STATE_GROUP: [v.topic for v in episode.vectors],
        },
        "video": options.video.to_dict(),
        "context_ns": options.context_ns,
        "context_topics": {
            v.topic: context_topic(v.topic) for v in episode.vectors if options.copies_ns > 0
        },
    }
    if options.arrays:  # absent otherwise, so containers without arrays keep their bytes
        layout["window_topics"] = {v.topic: window_topic(v.topic) for v in episode.vectors}
    return {
        "format": FORMAT,
        "episode": json.dumps(description, sort_keys=True),
        "stamps": json.dumps(stamps, sort_keys=True),
        "topics": json.dumps(topic_table(episode), sort_keys=True),
        "layout": json.dumps(layout, sort_keys=True),
    }


def topic_table(episode: EpisodeData) -> list[dict[str, Any]]:
    """One entry per topic: ``topic``, ``group``, ``rate_hz``, ``kind`` (the episodes row form)."""
    rows: list[dict[str, Any]] = [
        {"topic": c.topic, "group": CAMERA_GROUP, "rate_hz": c.fps, "kind": "camera"}
        for c in episode.cameras
    ]
    rows += [
        {"topic": v.topic, "group": STATE_GROUP, "rate_hz": v.rate_hz, "kind": v.kind}
        for v in episode.vectors
    ]
    return rows
