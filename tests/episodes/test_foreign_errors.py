"""Bad foreign recordings and mappings: errors name the file, topic and byte offset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcap.reader import make_reader
from mcap.writer import Writer

from episodes.errors import ContainerError, InputError, SchemaError, TopicError
from episodes.foreign import read_recording
from episodes.mapping import Mapping, load_mapping, mapping_from_dict, parse_field

from .foreign_files import ROS2_MAPPING, Source, ros2_messages, source_episode, write_ros2
from .test_foreign import _write_messages

MAPPING = mapping_from_dict(ROS2_MAPPING)


@pytest.fixture(scope="module")
def source() -> Source:
    return source_episode(seed=6)


@pytest.fixture(scope="module")
def ros2_file(source: Source, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ros2(tmp_path_factory.mktemp("ros2") / "bag.mcap", source)


def chunk_spans(path: Path) -> list[tuple[int, int]]:
    """(offset, length) of each chunk, from the file's own index."""
    with path.open("rb") as stream:
        summary = make_reader(stream).get_summary()
    assert summary is not None
    return sorted((c.chunk_start_offset, c.chunk_length) for c in summary.chunk_indexes)


def chunk_offsets(path: Path) -> list[int]:
    return [offset for offset, _ in chunk_spans(path)]


def with_mapping(**changes: Any) -> Mapping:
    body = json.loads(json.dumps(ROS2_MAPPING))
    for key, value in changes.items():
        if key == "topics":
            body["topics"] += value
        else:
            body[key] = value
    return mapping_from_dict(body)


def test_truncated_inside_a_record(ros2_file: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.mcap"
    last, _ = chunk_spans(ros2_file)[-1]
    cut.write_bytes(ros2_file.read_bytes()[: last + 100])
    with pytest.raises(ContainerError) as caught:
        read_recording(cut, MAPPING)
    assert (caught.value.file, caught.value.offset) == (str(cut), last)
    assert "truncated" in str(caught.value) and str(cut) in str(caught.value)


def test_truncated_summary(ros2_file: Path, tmp_path: Path) -> None:
    cut = tmp_path / "nofooter.mcap"
    data = ros2_file.read_bytes()[:-40]
    cut.write_bytes(data)
    with pytest.raises(ContainerError) as caught:
        read_recording(cut, MAPPING)
    assert caught.value.offset == len(data) and "truncated" in caught.value.message


def test_corrupt_chunk(ros2_file: Path, tmp_path: Path) -> None:
    offset, length = chunk_spans(ros2_file)[0]
    data = bytearray(ros2_file.read_bytes())
    middle = offset + length // 2
    data[middle : middle + 32] = bytes(32)
    bad = tmp_path / "corrupt.mcap"
    bad.write_bytes(bytes(data))
    with pytest.raises(ContainerError) as caught:
        read_recording(bad, MAPPING)
    assert (caught.value.file, caught.value.offset) == (str(bad), offset)


def test_not_mcap(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"#ROSBAG V2.0\n" + bytes(100))
    with pytest.raises(ContainerError) as caught:
        read_recording(junk, MAPPING)
    assert caught.value.offset == 0


def test_missing_required_role(ros2_file: Path) -> None:
    no_actions = mapping_from_dict({**ROS2_MAPPING, "topics": ROS2_MAPPING["topics"][:1]})
    with pytest.raises(TopicError) as caught:
        read_recording(ros2_file, no_actions)
    assert "'actions'" in caught.value.message and caught.value.file == str(ros2_file)


def test_mapped_topic_missing(ros2_file: Path) -> None:
    mapping = with_mapping(topics=[{"topic": "/gripper/effort", "role": "joint_velocities"}])
    with pytest.raises(TopicError) as caught:
        read_recording(ros2_file, mapping)
    assert (caught.value.file, caught.value.topic) == (str(ros2_file), "/gripper/effort")


def test_camera_with_the_wrong_schema(ros2_file: Path) -> None:
    mapping = with_mapping(topics=[{"topic": "/joint_states", "role": "camera"}])
    with pytest.raises(SchemaError) as caught:
        read_recording(ros2_file, mapping)
    error = caught.value
    assert (error.file, error.topic) == (str(ros2_file), "/joint_states")
    assert "sensor_msgs/msg/JointState" in error.message and error.offset in chunk_offsets(
        ros2_file
    )


def test_field_missing_from_the_messages(ros2_file: Path) -> None:
    body = json.loads(json.dumps(ROS2_MAPPING))
    body["topics"][1]["field"] = "command"
    with pytest.raises(SchemaError) as caught:
        read_recording(ros2_file, mapping_from_dict(body))
    error = caught.value
    assert (error.file, error.topic) == (str(ros2_file), "/arm/command")
    assert error.offset in chunk_offsets(ros2_file) and "command" in error.message


def test_unsupported_pixel_encoding(source: Source, tmp_path: Path) -> None:
    messages = list(ros2_messages(source))
    for _, topic, _, body in messages:
        if topic == "/wrist/image_raw":
            body["encoding"] = "16UC1"
    path = tmp_path / "depth.mcap"
    _write_messages(path, messages)
    with pytest.raises(SchemaError) as caught:
        read_recording(path, MAPPING)
    assert caught.value.topic == "/wrist/image_raw" and caught.value.offset is not None
    assert "16UC1" in caught.value.message


def test_unsupported_message_encoding(tmp_path: Path) -> None:
    path = tmp_path / "proto.mcap"
    with path.open("wb") as stream:
        writer = Writer(stream)
        writer.start("", "tests")
        schema = writer.register_schema("foxglove.CompressedImage", "protobuf", b"\x0a\x00")
        channel = writer.register_channel("/cam", "protobuf", schema)
        writer.add_message(channel, 1, b"\x00", 1)
        writer.finish()  # type: ignore[no-untyped-call]
    with pytest.raises(SchemaError) as caught:
        read_recording(path, Mapping(robot="r", task="t"))
    assert caught.value.topic == "/cam" and "protobuf" in caught.value.message
    assert caught.value.offset is not None and caught.value.file == str(path)


def test_robot_and_task_are_required(ros2_file: Path) -> None:
    with pytest.raises(InputError) as caught:
        read_recording(ros2_file, Mapping(task="t"))
    assert "--robot" in caught.value.message and caught.value.file == str(ros2_file)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"robots": "x"}, "unknown keys"),
        ({"window_s": "2"}, "wrong type"),
        ({"success": 1}, "wrong type"),
        ({"window_s": 0}, "positive"),
        ({"timestamps": "publish"}, "timestamps"),
        ({"topics": [{"topic": "/a", "role": "lidar"}]}, "role"),
        ({"topics": [{"topic": "/a"}]}, "'role'"),
        ({"topics": [{"topic": "/a", "role": "camera", "field": "data"}]}, "no field"),
        ({"topics": [{"topic": "/a", "role": "actions", "field": "a[x]"}]}, "malformed"),
        (
            {"topics": [{"topic": "/a", "role": "gripper"}, {"topic": "/b", "role": "gripper"}]},
            "once",
        ),
    ],
)
def test_bad_mappings(body: dict[str, Any], words: str) -> None:
    with pytest.raises(InputError) as caught:
        mapping_from_dict(body)
    assert words in caught.value.message


def test_mapping_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text("robot = ")
    with pytest.raises(InputError) as caught:
        load_mapping(path)
    assert caught.value.file == str(path) and "TOML" in caught.value.message
    path.write_text('robot = "r"\n[[topics]]\ntopic = "/x"\nrole = "gripper"\nextra = 1\n')
    with pytest.raises(InputError, match="unknown keys") as caught:
        load_mapping(path)
    assert caught.value.file == str(path)


def test_field_paths() -> None:
    steps = parse_field("joints.q[0:6]")
    assert [(s.name, s.start, s.stop, s.sliced) for s in steps] == [
        ("joints", None, None, False),
        ("q", 0, 6, True),
    ]
    assert parse_field("position[2]")[0].start == 2
