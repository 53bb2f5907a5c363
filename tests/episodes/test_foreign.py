"""Foreign recordings (ROS 2 and Foxglove JSON, default chunking) into Quarry containers."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from mcap.writer import IndexType

from episodes.episode import ACTIONS, GRIPPER, JOINT_POSITIONS, JOINT_VELOCITIES
from episodes.foreign import ingest_mcap, read_recording
from episodes.ingest import prepare_bytes
from episodes.mapping import Mapping, load_mapping, mapping_from_dict
from episodes.quality import DECODE_FAILURE, DROPPED_FRAMES
from episodes.reader import EpisodeReader
from episodes.spec import SampleSpec
from episodes.writer import WriteOptions, write_episode

from .foreign_files import (
    DROPPED,
    FOXGLOVE_MAPPING_TOML,
    ROS2_MAPPING,
    Source,
    source_episode,
    write_foxglove,
    write_ros2,
)


@pytest.fixture(scope="module")
def source() -> Source:
    return source_episode()


@pytest.fixture(scope="module")
def ros2_file(source: Source, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ros2(tmp_path_factory.mktemp("ros2") / "bag_0.mcap", source)


@pytest.fixture(scope="module")
def foxglove_file(source: Source, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_foxglove(tmp_path_factory.mktemp("fox") / "session.mcap", source)


@pytest.fixture(scope="module")
def fox_mapping(tmp_path_factory: pytest.TempPathFactory) -> Mapping:
    path = tmp_path_factory.mktemp("map") / "fox.toml"
    path.write_text(FOXGLOVE_MAPPING_TOML)
    return load_mapping(path)


def quality(episode: Any) -> Any:
    buffer = io.BytesIO()
    write_episode(episode, buffer, WriteOptions())
    return prepare_bytes(buffer.getvalue(), "memory://x.mcap")


def test_ros2_recording_is_read_at_its_recorded_times(ros2_file: Path, source: Source) -> None:
    foreign = read_recording(ros2_file, mapping_from_dict(ROS2_MAPPING))
    ep = foreign.episode
    cams = {c.topic: c for c in ep.cameras}
    assert set(cams) == {"/front/image_raw/compressed", "/wrist/image_raw"}
    front, wrist = cams["/front/image_raw/compressed"], cams["/wrist/image_raw"]
    assert (front.fps, wrist.fps) == (30.0, 15.0)  # measured through jitter and a gap
    np.testing.assert_array_equal(front.timestamps_ns, source.stamps["/cam/front"])
    want = source.episode.cameras[1].frames
    np.testing.assert_array_equal(wrist.frames, want)  # raw bgr8 comes back exactly
    assert [v.kind for v in ep.vectors] == [ACTIONS, GRIPPER, JOINT_POSITIONS, JOINT_VELOCITIES]
    pos, want_pos = ep.vector(JOINT_POSITIONS), source.episode.vector(JOINT_POSITIONS)
    assert pos.names == want_pos.names and pos.rate_hz == 100.0
    np.testing.assert_array_equal(pos.values, want_pos.values)
    assert ep.vector(JOINT_VELOCITIES).names[0] == "joint_0_vel"
    assert ep.vector(GRIPPER).names == ("gripper",) and ep.vector(ACTIONS).values.shape[1] == 7
    assert ep.control_hz == 50.0 and ep.stamps.robot_sw_version == "humble-4.2"
    streams = [*ep.cameras, *ep.vectors]
    assert ep.start_ns == min(int(s.timestamps_ns.min()) for s in streams)
    assert (ep.end_ns - ep.start_ns) % round(1e9 / 50) == 0
    assert foreign.source_failures == {c: 0 for c in cams}


def test_ros2_qc_finds_the_dropped_frames(ros2_file: Path) -> None:
    prepared = quality(read_recording(ros2_file, mapping_from_dict(ROS2_MAPPING)).episode)
    assert prepared.quality.flag_names == [DROPPED_FRAMES]
    (detail,) = prepared.quality.flags[0].detail["topics"]
    assert detail["topic"] == "/front/image_raw/compressed" and detail["long_gaps"] == 1
    gap_ms = (DROPPED.stop - DROPPED.start + 1) * 1000 / 30
    assert detail["max_gap_ms"] == pytest.approx(gap_ms, abs=3)
    assert len(prepared.stats) == 13 + 7


def test_foxglove_json_with_a_toml_mapping(foxglove_file: Path, fox_mapping: Mapping) -> None:
    ep = read_recording(foxglove_file, fox_mapping).episode
    assert [c.topic for c in ep.cameras] == ["/cam/front", "/cam/wrist"]
    assert [c.fps for c in ep.cameras] == [30.0, 15.0]
    assert (ep.robot_id, ep.robot_model, ep.site, ep.success) == (
        "fox-arm-02",
        "fox-6",
        "lab-b",
        True,
    )
    assert ep.stamps.pipeline_version == 7 and ep.stamps.robot_sw_version == "fox-1.0.3"
    assert ep.vector(JOINT_VELOCITIES).names == tuple(f"joint_velocities_{i}" for i in range(6))
    prepared = quality(ep)
    assert prepared.quality.flag_names == [DROPPED_FRAMES]
    assert prepared.quality.flags[0].detail["topics"][0]["topic"] == "/cam/front"
    with EpisodeReader(io.BytesIO(_container(ep))) as reader:
        sample = reader.read_sample(ep.start_ns + 10**9, SampleSpec())
    assert sample.state.shape == (16, 13) and sample.state_valid.all()
    assert sample.frames["/cam/wrist"].shape == (2, 48, 64, 3)


def test_unchunked_recording_without_a_summary(
    source: Source, fox_mapping: Mapping, tmp_path: Path
) -> None:
    bare = dict(use_chunking=False, use_statistics=False, use_summary_offsets=False)
    bare |= dict(index_types=IndexType.NONE, repeat_channels=False, repeat_schemas=False)
    path = write_foxglove(tmp_path / "bare.mcap", source, **bare)
    ep = read_recording(path, fox_mapping).episode
    assert [len(c.frames) for c in ep.cameras] == [len(c.frames) for c in source.episode.cameras]
    assert len(ep.vector(ACTIONS).values) == len(source.episode.vector(ACTIONS).values)


def _container(ep: Any) -> bytes:
    buffer = io.BytesIO()
    write_episode(ep, buffer, WriteOptions())
    return buffer.getvalue()


def test_json_and_toml_mappings_agree(fox_mapping: Mapping, tmp_path: Path) -> None:
    import tomllib

    path = tmp_path / "fox.json"
    path.write_text(json.dumps(tomllib.loads(FOXGLOVE_MAPPING_TOML)))
    assert load_mapping(path) == fox_mapping


def test_ingest_registers_and_is_idempotent(
    pg_conn: psycopg.Connection[Any],
    ros2_file: Path,
    foxglove_file: Path,
    fox_mapping: Mapping,
    tmp_path: Path,
) -> None:
    first = ingest_mcap(pg_conn, tmp_path, [ros2_file], mapping=mapping_from_dict(ROS2_MAPPING))
    fox = ingest_mcap(pg_conn, tmp_path, [foxglove_file], mapping=fox_mapping, robot="fox-arm-09")
    again = ingest_mcap(pg_conn, tmp_path, [ros2_file], robot="x", task="y")
    assert [r.created for r in first + fox + again] == [True, True, False]
    assert again[0].episode_id == first[0].episode_id and again[0].uri == first[0].uri
    assert first[0].flags == (DROPPED_FRAMES,) and fox[0].robot_id == "fox-arm-09"
    rows = pg_conn.execute(
        "SELECT robot_id, task_id, schema_version, pipeline_version, robot_sw_version, topics"
        " FROM episodes ORDER BY robot_id"
    ).fetchall()
    assert [r[:5] for r in rows] == [
        ("fox-arm-09", "pick_place_cube", 1, 7, "fox-1.0.3"),
        ("ros-arm-01", "pick_cube", 1, 1, "humble-4.2"),
    ]
    assert {t["group"] for t in rows[1][5]} == {"cameras", "state"}
    flags = pg_conn.execute("SELECT flag, detail FROM episode_quality_flags").fetchall()
    assert sorted(f[0] for f in flags) == [DROPPED_FRAMES, DROPPED_FRAMES]
    stats = pg_conn.execute("SELECT count(*) FROM episode_stats").fetchone()
    assert stats == (2 * 20,)
    with EpisodeReader(first[0].uri) as reader:
        assert reader.info.layout == "grouped" and reader.info.video["codec"] == "h264"
        assert (
            json.loads(reader.info.episode["extra"]["source_topics"])["/action"] == "/arm/command"
        )


def test_frames_that_do_not_decode_are_left_out_and_flagged(source: Source, tmp_path: Path) -> None:
    from . import foreign_files

    messages = list(foreign_files.ros2_messages(source))
    garbled = 0
    for i, (_, topic, _, body) in enumerate(messages):
        if topic.endswith("compressed") and 30 <= i < 33:
            body["data"] = b"\xff\xd8" + bytes(40)
            garbled += 1
    path = tmp_path / "garbled.mcap"
    _write_messages(path, messages)
    foreign = read_recording(path, mapping_from_dict(ROS2_MAPPING))
    assert foreign.source_failures["/front/image_raw/compressed"] == garbled == 3
    from episodes.foreign import add_source_failures

    prepared = quality(foreign.episode)
    add_source_failures(prepared.quality, foreign.source_failures)
    assert DECODE_FAILURE in prepared.quality.flag_names
    assert prepared.quality.report["flags"] == prepared.quality.flag_names


def _write_messages(path: Path, messages: list[tuple[int, str, str, dict[str, Any]]]) -> None:
    from mcap_ros2.writer import Writer as Ros2Writer

    from .foreign_files import ROS_DEFS

    with path.open("wb") as stream, Ros2Writer(stream) as writer:
        schemas = {name: writer.register_msgdef(name, text) for name, text in ROS_DEFS.items()}
        for log_time, topic, kind, body in sorted(messages, key=lambda m: m[0]):
            writer.write_message(topic, schemas[kind], body, log_time=log_time)
