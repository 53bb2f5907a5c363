"""Recordings without actions, and any MCAP described as ``mcap info`` does.

The ROS 2 recording here has two JPEG ``CompressedImage`` cameras and a ``JointState`` and
no actions topic (mcap_ros2's writer, CDR): actions are derived from the joint positions and
flagged ``actions_derived``; ``survey`` describes it and proposes a mapping ingest accepts.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from mcap.reader import make_reader
from mcap.writer import IndexType

from episodes._streams import derive_actions
from episodes.episode import ACTIONS, JOINT_POSITIONS, JOINT_VELOCITIES, VectorStream
from episodes.errors import TopicError
from episodes.foreign import ingest_mcap, read_recording
from episodes.mapping import load_mapping, mapping_from_dict
from episodes.quality import ACTIONS_DERIVED
from episodes.suggest import mapping_text
from episodes.survey import survey

from .foreign_files import (
    ROS2_MAPPING,
    Source,
    source_episode,
    write_foxglove,
    write_ros2,
    write_ros2_without_actions,
)

IDENTITY = {"robot": "ros-arm-05", "task": "wipe"}


@pytest.fixture(scope="module")
def source() -> Source:
    return source_episode(seed=5)


@pytest.fixture(scope="module")
def bare_ros2(source: Source, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ros2_without_actions(tmp_path_factory.mktemp("noact") / "bag_0.mcap", source)


def test_actions_are_the_next_control_steps_joint_positions(
    bare_ros2: Path, source: Source
) -> None:
    foreign = read_recording(bare_ros2, mapping_from_dict(IDENTITY))
    ep = foreign.episode
    assert len(ep.cameras) == 2 and foreign.derived_from == "/joint_states"
    pos, act = ep.vector(JOINT_POSITIONS), ep.vector(ACTIONS)
    # Joint states at 100 Hz: each action is the next sample's positions; the last has none.
    np.testing.assert_array_equal(act.values, pos.values[1:])
    np.testing.assert_array_equal(act.timestamps_ns, pos.timestamps_ns[:-1])
    assert act.names == tuple(f"{n}_next" for n in pos.names) and act.rate_hz == pos.rate_hz
    assert ep.control_hz == pos.rate_hz == pytest.approx(100.0, abs=0.2)
    assert '"/action": "derived:/joint_states"' in ep.extra["source_topics"]


def test_a_control_rate_picks_the_sample_one_period_later() -> None:
    # 100 Hz samples with up to 2 ms jitter; control at 50 Hz: two samples on. The last
    # two, unjittered, have no sample 20 ms on: the nearest is half a period away.
    rng = np.random.default_rng(3)
    jitter = rng.integers(0, 2_000_000, 50)
    jitter[-2:] = 0
    times = np.arange(50) * 10_000_000 + jitter
    values = np.arange(50, dtype=np.float32)[:, None]
    pos = VectorStream("/p", JOINT_POSITIONS, 100.0, ("j",), times.astype(np.int64), values)
    act = derive_actions(pos, 50.0)
    np.testing.assert_array_equal(act.values[:, 0], np.arange(2, 50))
    np.testing.assert_array_equal(act.timestamps_ns, times[:48])


def test_a_named_actions_topic_is_used_not_derived(tmp_path: Path, source: Source) -> None:
    foreign = read_recording(
        write_ros2(tmp_path / "b.mcap", source), mapping_from_dict(ROS2_MAPPING)
    )
    assert foreign.derived_from is None and foreign.episode.vector(ACTIONS).values.shape[1] == 7


def test_recorded_commands_are_not_replaced_by_derived_ones(tmp_path: Path, source: Source) -> None:
    path = write_ros2(tmp_path / "c.mcap", source)
    gripper_only = {**ROS2_MAPPING, "topics": ROS2_MAPPING["topics"][:1]}
    with pytest.raises(TopicError) as caught:
        read_recording(path, mapping_from_dict(gripper_only))
    assert "/arm/command" in caught.value.message and "derive_actions" in caught.value.message
    forced = read_recording(path, mapping_from_dict({**gripper_only, "derive_actions": True}))
    assert forced.derived_from == "/joint_states"


def test_derived_actions_are_flagged_at_ingest(
    pg_conn: psycopg.Connection[Any], bare_ros2: Path, tmp_path: Path
) -> None:
    (done,) = ingest_mcap(pg_conn, tmp_path, [bare_ros2], mapping=mapping_from_dict(IDENTITY))
    assert ACTIONS_DERIVED in done.flags
    row = pg_conn.execute(
        "SELECT detail FROM episode_quality_flags WHERE episode_id = %s AND flag = %s",
        (done.episode_id, ACTIONS_DERIVED),
    ).fetchone()
    assert row is not None
    assert row[0]["topics"] == [{"topic": "/joint_states", "rule": "next_joint_positions"}]


def test_survey_describes_a_ros2_recording_as_mcap_info_does(bare_ros2: Path) -> None:
    info = survey(bare_ros2)
    with bare_ros2.open("rb") as stream:
        reader = make_reader(stream)
        summary = reader.get_summary()
        counts = Counter(channel.topic for _, channel, _ in reader.iter_messages())
    assert summary is not None and summary.statistics is not None
    assert (info["format"], info["profile"]) == ("foreign", "ros2")
    assert info["messages"] == summary.statistics.message_count
    assert (info["start_ns"], info["end_ns"]) == (
        summary.statistics.message_start_time,
        summary.statistics.message_end_time,
    )
    topics = {t["topic"]: t for t in info["topics"]}
    assert {t: v["messages"] for t, v in topics.items()} == dict(counts)
    joints = topics["/joint_states"]
    assert (joints["schema"], joints["schema_encoding"], joints["message_encoding"]) == (
        "sensor_msgs/msg/JointState",
        "ros2msg",
        "cdr",
    )
    assert joints["rate_hz"] == pytest.approx(100.0, rel=0.05)
    assert joints["roles"] == [JOINT_POSITIONS, JOINT_VELOCITIES]
    chunks = info["chunks"]
    assert chunks["count"] == len(summary.chunk_indexes) > 1
    assert set(chunks["compression"]) == {"zstd"} and chunks["overlaps"] is False
    assert info["indexed"]["indexed"] and info["indexed"]["statistics"]
    assert info["damage"] is None and any("derives actions" in n for n in info["mapping_notes"])


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_the_suggested_mapping_is_accepted_as_is(
    bare_ros2: Path, tmp_path: Path, suffix: str
) -> None:
    info = survey(bare_ros2)
    path = tmp_path / f"suggested{suffix}"
    path.write_text(mapping_text(info["mapping"], info["mapping_notes"], suffix == ".toml"))
    ep = read_recording(bare_ros2, load_mapping(path)).episode
    assert (ep.robot_id, ep.task_id) == ("unknown", "unknown")
    assert len(ep.cameras) == 2 and ep.vector(JOINT_VELOCITIES) is not None


def test_the_suggestion_finds_every_role_of_a_full_ros2_recording(
    tmp_path: Path, source: Source
) -> None:
    path = write_ros2(tmp_path / "full.mcap", source)
    info = survey(path)
    roles = {t["topic"]: t["roles"] for t in info["topics"]}
    assert roles["/arm/command"] == [ACTIONS] and roles["/gripper/position"] == ["gripper"]
    assert roles["/wrist/image_raw"] == ["camera"]
    foreign = read_recording(path, mapping_from_dict(info["mapping"]))
    assert foreign.derived_from is None and foreign.episode.vector(ACTIONS).values.shape[1] == 7


def test_an_unindexed_foxglove_file(tmp_path: Path, source: Source) -> None:
    bare = dict(use_chunking=False, use_statistics=False, use_summary_offsets=False)
    bare |= dict(index_types=IndexType.NONE, repeat_channels=False, repeat_schemas=False)
    info = survey(write_foxglove(tmp_path / "bare.mcap", source, **bare))
    assert info["chunks"]["count"] == 0 and not info["indexed"]["statistics"]
    assert info["indexed"]["chunk_indexes"] == info["indexed"]["message_indexes"] == 0
    assert {t["message_encoding"] for t in info["topics"]} == {"json"}
    # Foxglove's robot.Arm topics carry no role the survey can infer: the notes say so.
    assert any("joint positions" in n for n in info["mapping_notes"])
