"""Foreign recordings for the ingest tests, written with the other tools' own writers.

ROS 2 files come from ``mcap_ros2.writer`` (CDR, ros2msg schemas, the definitions as rosbag2
stores them); Foxglove files from mcap's ``Writer`` with JSON schemas and JSON messages, as
Foxglove's SDKs write them. Both use mcap's default chunking (1 MiB, messages interleaved by
log time). Content comes from a synthetic episode: stamps jittered by up to 2 ms, log times a
transport delay later, and a run of frames dropped from one camera.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mcap.writer import Writer
from mcap_ros2.writer import Writer as Ros2Writer

from episodes._jpeg import encode_jpeg
from episodes.episode import ACTIONS, GRIPPER, JOINT_POSITIONS, JOINT_VELOCITIES, EpisodeData
from episodes.synth import FleetConfig, synth_episode

_TIME = """================================================================================
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec"""
_HEADER = f"""================================================================================
MSG: std_msgs/Header
builtin_interfaces/Time stamp
string frame_id
{_TIME}"""
ROS_DEFS = {
    "sensor_msgs/msg/CompressedImage": f"std_msgs/Header header\nstring format\nuint8[] data\n"
    f"{_HEADER}",
    "sensor_msgs/msg/Image": "std_msgs/Header header\nuint32 height\nuint32 width\n"
    "string encoding\nuint8 is_bigendian\nuint32 step\nuint8[] data\n" + _HEADER,
    "sensor_msgs/msg/JointState": "std_msgs/Header header\nstring[] name\nfloat64[] position\n"
    "float64[] velocity\nfloat64[] effort\n" + _HEADER,
    "std_msgs/msg/Float64": "float64 data",
    "std_msgs/msg/Float64MultiArray": """MultiArrayLayout layout
float64[] data
================================================================================
MSG: std_msgs/MultiArrayLayout
MultiArrayDimension[] dim
uint32 data_offset
================================================================================
MSG: std_msgs/MultiArrayDimension
string label
uint32 size
uint32 stride""",
}
_STAMP = {"type": "object", "properties": {"sec": {"type": "integer"}, "nsec": {"type": "integer"}}}
FOXGLOVE_SCHEMAS = {
    "foxglove.CompressedImage": {
        "title": "foxglove.CompressedImage",
        "type": "object",
        "properties": {
            "timestamp": _STAMP,
            "frame_id": {"type": "string"},
            "data": {"type": "string", "contentEncoding": "base64"},
            "format": {"type": "string"},
        },
    },
    "foxglove.RawImage": {
        "title": "foxglove.RawImage",
        "type": "object",
        "properties": {
            "timestamp": _STAMP,
            "frame_id": {"type": "string"},
            "width": {"type": "integer"},
            "height": {"type": "integer"},
            "encoding": {"type": "string"},
            "step": {"type": "integer"},
            "data": {"type": "string", "contentEncoding": "base64"},
        },
    },
    "robot.Arm": {"title": "robot.Arm", "type": "object"},
}
#: Small, short, two cameras: enough for every check, quick on two cores.
CONFIG = FleetConfig(
    width=64, height=48, duration_s=(4.0, 4.0), cameras=(("front", 30.0), ("wrist", 15.0))
)
#: Frames of 112x84: the recording of two JPEG cameras and joint states is ~490 KB.
SALVAGE_CONFIG = dataclasses.replace(CONFIG, width=112, height=84)
DROPPED_TOPIC = "front"
#: Frames dropped from the front camera: 0.5 s from 2 s in.
DROPPED = slice(60, 75)


@dataclass
class Source:
    """What went into a foreign file: the episode and the stamps/log times actually written."""

    episode: EpisodeData
    stamps: dict[str, np.ndarray]


def source_episode(seed: int = 4, config: FleetConfig = CONFIG) -> Source:
    """A synthetic episode with jittered stamps and a run of front-camera frames dropped."""
    episode = synth_episode(seed, 0, config, faults=())
    rng = np.random.default_rng(seed)
    stamps = {}
    for cam in episode.cameras:
        if cam.topic.endswith(DROPPED_TOPIC):
            keep = np.ones(len(cam.frames), dtype=bool)
            keep[DROPPED] = False
            cam.frames, cam.timestamps_ns = cam.frames[keep], cam.timestamps_ns[keep]
        cam.timestamps_ns = cam.timestamps_ns + rng.integers(0, 2_000_000, len(cam.frames))
        stamps[cam.topic] = cam.timestamps_ns
    return Source(episode, stamps)


def _delay(rng: np.random.Generator, stamp: int) -> int:
    return int(stamp) + int(rng.integers(1_000_000, 5_000_000))


def _ros_stamp(ns: int) -> dict[str, Any]:
    return {"stamp": {"sec": int(ns) // 10**9, "nanosec": int(ns) % 10**9}, "frame_id": "base"}


def ros2_messages(
    source: Source, raw_camera: str = "wrist"
) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
    """(log time, topic, type, message) of a ROS 2 robot: JPEG and raw BGR cameras,
    JointState, a Float64 gripper and Float64MultiArray actions."""
    ep, rng = source.episode, np.random.default_rng(1)
    yield from _ros2_cameras(ep, rng, raw_camera)
    pos, vel = ep.vector(JOINT_POSITIONS), ep.vector(JOINT_VELOCITIES)
    for i, t in enumerate(pos.timestamps_ns):
        body = {"header": _ros_stamp(t), "name": list(pos.names), "effort": []}
        body |= {"position": pos.values[i].tolist(), "velocity": vel.values[i].tolist()}
        yield _delay(rng, t), "/joint_states", "sensor_msgs/msg/JointState", body
    grip = ep.vector(GRIPPER)
    for i, t in enumerate(grip.timestamps_ns):
        yield (
            int(t),
            "/gripper/position",
            "std_msgs/msg/Float64",
            {"data": float(grip.values[i, 0])},
        )
    act = ep.vector(ACTIONS)
    for i, t in enumerate(act.timestamps_ns):
        body = {"layout": {"dim": [], "data_offset": 0}, "data": act.values[i].tolist()}
        yield int(t), "/arm/command", "std_msgs/msg/Float64MultiArray", body


def _ros2_cameras(
    ep: EpisodeData, rng: np.random.Generator, raw_camera: str
) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
    """The raw camera as ``bgr8`` ``Image``, the others as JPEG ``CompressedImage``."""
    for cam in ep.cameras:
        view = cam.topic.rsplit("/", 1)[-1]
        raw = view == raw_camera
        jpegs = [] if raw else encode_jpeg(cam.frames, 90)
        for i, t in enumerate(cam.timestamps_ns):
            body: dict[str, Any] = {"header": _ros_stamp(t)}
            if raw:
                body |= {"height": cam.height, "width": cam.width, "encoding": "bgr8"}
                body |= {"is_bigendian": 0, "step": cam.width * 3}
                body["data"] = cam.frames[i][:, :, ::-1].tobytes()
                yield _delay(rng, t), f"/{view}/image_raw", "sensor_msgs/msg/Image", body
            else:
                body |= {"format": "jpeg", "data": jpegs[i]}
                kind = "sensor_msgs/msg/CompressedImage"
                yield _delay(rng, t), f"/{view}/image_raw/compressed", kind, body


def write_ros2(path: Path, source: Source) -> Path:
    """A ROS 2 recording (mcap_ros2's writer, default 1 MiB chunks, log-time order)."""
    messages = sorted(ros2_messages(source), key=lambda m: m[0])
    with path.open("wb") as stream, Ros2Writer(stream) as writer:
        schemas = {name: writer.register_msgdef(name, text) for name, text in ROS_DEFS.items()}
        for log_time, topic, kind, body in messages:
            writer.write_message(topic, schemas[kind], body, log_time=log_time)
    return path


#: What a ROS 2 robot without a command topic records.
CAMERAS_AND_JOINTS = ("sensor_msgs/msg/CompressedImage", "sensor_msgs/msg/JointState")


def write_ros2_without_actions(path: Path, source: Source, *, chunk_size: int = 32 * 1024) -> Path:
    """A ROS 2 recording of two JPEG ``CompressedImage`` cameras and a ``JointState``, no
    actions topic: mcap_ros2's writer (CDR, ros2msg schemas), zstd chunks of ``chunk_size``
    bytes, so that a cut at the tail leaves whole chunks before it."""
    messages = [m for m in ros2_messages(source, raw_camera="") if m[2] in CAMERAS_AND_JOINTS]
    messages.sort(key=lambda m: m[0])
    with path.open("wb") as stream, Ros2Writer(stream, chunk_size=chunk_size) as writer:
        schemas = {
            name: writer.register_msgdef(name, ROS_DEFS[name]) for name in CAMERAS_AND_JOINTS
        }
        for log_time, topic, kind, body in messages:
            writer.write_message(topic, schemas[kind], body, log_time=log_time)
    return path


ROS2_MAPPING = {
    "robot": "ros-arm-01",
    "task": "pick_cube",
    "robot_sw_version": "humble-4.2",
    "topics": [
        {"topic": "/gripper/position", "role": "gripper", "names": ["gripper"]},
        {"topic": "/arm/command", "role": "actions"},
    ],
}


def foxglove_messages(source: Source) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
    """(log time, topic, schema, message) of a Foxglove-SDK robot: a JPEG camera, a raw RGB
    camera, and one ``robot.Arm`` JSON topic holding joints, gripper and command."""
    ep, rng = source.episode, np.random.default_rng(2)
    for cam in ep.cameras:
        view = cam.topic.rsplit("/", 1)[-1]
        jpegs = encode_jpeg(cam.frames, 90) if view == "front" else []
        for i, t in enumerate(cam.timestamps_ns):
            body: dict[str, Any] = {"timestamp": _fox_stamp(t), "frame_id": view}
            if jpegs:
                body |= {"format": "jpeg", "data": base64.b64encode(jpegs[i]).decode()}
                yield _delay(rng, t), f"/{view}", "foxglove.CompressedImage", body
            else:
                body |= {"width": cam.width, "height": cam.height, "encoding": "rgb8"}
                body |= {
                    "step": cam.width * 3,
                    "data": base64.b64encode(cam.frames[i].tobytes()).decode(),
                }
                yield _delay(rng, t), f"/{view}", "foxglove.RawImage", body
    pos, vel = ep.vector(JOINT_POSITIONS), ep.vector(JOINT_VELOCITIES)
    grip, act = ep.vector(GRIPPER), ep.vector(ACTIONS)
    for i, t in enumerate(pos.timestamps_ns):
        body = {"timestamp": _fox_stamp(t), "joints": {"q": pos.values[i].tolist()}}
        body["joints"]["qd"] = vel.values[i].tolist()
        yield _delay(rng, t), "/arm/state", "robot.Arm", body
    for i, t in enumerate(grip.timestamps_ns):
        body = {"timestamp": _fox_stamp(t), "gripper": float(grip.values[i, 0])}
        yield _delay(rng, t), "/arm/gripper", "robot.Arm", body
    for i, t in enumerate(act.timestamps_ns):
        body = {"timestamp": _fox_stamp(t), "command": act.values[i].tolist()}
        yield int(t), "/arm/command", "robot.Arm", body


def _fox_stamp(ns: int) -> dict[str, int]:
    return {"sec": int(ns) // 10**9, "nsec": int(ns) % 10**9}


def write_foxglove(path: Path, source: Source, **options: Any) -> Path:
    """A Foxglove JSON recording (mcap's writer, default chunking unless ``options`` say
    otherwise, log-time order)."""
    messages = sorted(foxglove_messages(source), key=lambda m: m[0])
    with path.open("wb") as stream:
        writer = Writer(stream, **options)
        writer.start("", "foxglove-sdk tests")
        schemas = {
            name: writer.register_schema(name, "jsonschema", json.dumps(body).encode())
            for name, body in FOXGLOVE_SCHEMAS.items()
        }
        channels: dict[str, int] = {}
        for log_time, topic, schema, body in messages:
            if topic not in channels:
                channels[topic] = writer.register_channel(topic, "json", schemas[schema])
            data = json.dumps(body).encode()
            writer.add_message(channels[topic], log_time, data, log_time)
        writer.finish()  # type: ignore[no-untyped-call]
    return path


FOXGLOVE_MAPPING_TOML = """
robot = "fox-arm-02"
robot_model = "fox-6"
site = "lab-b"
task = "pick_place_cube"
success = true
schema_version = 1
pipeline_version = 7
robot_sw_version = "fox-1.0.3"

[[topics]]
topic = "/front"
role = "camera"
name = "/cam/front"

[[topics]]
topic = "/wrist"
role = "camera"
name = "/cam/wrist"
rate_hz = 15

[[topics]]
topic = "/arm/state"
role = "joint_positions"
field = "joints.q"

[[topics]]
topic = "/arm/state"
role = "joint_velocities"
field = "joints.qd"

[[topics]]
topic = "/arm/gripper"
role = "gripper"
field = "gripper"

[[topics]]
topic = "/arm/command"
role = "actions"
field = "command[0:7]"
"""
