"""Reading LeRobot v3.0 datasets (episodes.lerobot): the fixtures lerobot's writer made
(tests/data/lerobot/), from a folder and from S3 (moto's server on loopback), and each bad
input named by file, episode and feature."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto.server import ThreadedMotoServer

from episodes.episode import EpisodeData
from episodes.errors import InputError
from episodes.ingest import store_episode
from episodes.lerobot.ingest import (
    STATS_MISMATCH,
    LeRobotOptions,
    camera_topic,
    check_stats,
    read_episode,
    task_id,
)
from episodes.lerobot.source import LeRobotSource
from episodes.writer import WriteOptions

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "lerobot"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"
WRIST = "videos/observation.images.wrist/chunk-000/file-000.mp4"


@pytest.fixture
def rig2(tmp_path: Path) -> Path:
    copy = tmp_path / "rig2"
    shutil.copytree(FIXTURES / "rig2", copy)
    return copy


def read(root: Path, index: int) -> None:
    source = LeRobotSource(str(root))
    meta = source.episodes[index]
    read_episode(source, meta, source.episode_rows(meta), "id", LeRobotOptions())


def edit_info(root: Path, **changes: object) -> None:
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    info.update(changes)
    path.write_text(json.dumps(info))


def test_fixtures_read_as_lerobot_wrote_them() -> None:
    recorded = json.loads((FIXTURES / "VERSION.json").read_text())
    assert recorded["written_by"]["lerobot"] == "0.4.4"
    source = LeRobotSource(str(FIXTURES / "rig3"))
    assert source.cameras == [f"observation.images.{c}" for c in ("front", "left", "right")]
    assert [(v.key, v.role, len(v.names)) for v in source.vectors] == [
        ("observation.state", "joint_positions", 8),
        ("action", "actions", 7),
    ]
    meta = source.episodes[1]
    episode = read_episode(source, meta, source.episode_rows(meta), "id", LeRobotOptions())
    assert episode.instruction == "wipe the table" and episode.control_hz == 10.0
    assert [c.topic for c in episode.cameras] == ["/cam/front", "/cam/left", "/cam/right"]
    assert {c.frames.shape for c in episode.cameras} == {(22, 64, 96, 3)}
    assert np.array_equal(episode.vectors[0].timestamps_ns, np.arange(22) * 100_000_000)
    assert episode.end_ns == 22 * 100_000_000 and episode.steps == 22


def test_names() -> None:
    assert camera_topic("observation.images.wrist") == "/cam/wrist"
    assert task_id("Pick up the red cube!").startswith("pick-up-the-red-cube-")


def test_unknown_codebase_version(rig2: Path) -> None:
    edit_info(rig2, codebase_version="v2.1")
    with pytest.raises(InputError, match=r"unknown LeRobot codebase_version 'v2.1'") as caught:
        LeRobotSource(str(rig2))
    assert caught.value.file == f"{rig2}/meta/info.json"


def test_unmappable_features(rig2: Path) -> None:
    info = json.loads((rig2 / "meta/info.json").read_text())
    features = info["features"]
    features["observation.images.top"] = {"dtype": "image", "shape": [64, 96, 3], "names": None}
    edit_info(rig2, features=features)
    with pytest.raises(InputError, match=r"of dtype image .* cannot be mapped") as caught:
        LeRobotSource(str(rig2))
    assert caught.value.topic == "observation.images.top"
    del features["observation.images.top"]
    features["observation.velocity"] = {"dtype": "float32", "shape": [6], "names": None}
    edit_info(rig2, features=features)
    with pytest.raises(InputError, match=r"--feature observation\.velocity=ROLE"):
        LeRobotSource(str(rig2))
    source = LeRobotSource(str(rig2), {"observation.velocity": "ignore"})
    assert [v.key for v in source.vectors] == ["observation.state", "action"]


def test_missing_video_file(rig2: Path) -> None:
    (rig2 / WRIST).unlink()
    with pytest.raises(InputError, match=r"episode 2: file missing") as caught:
        read(rig2, 2)
    assert caught.value.file == f"{rig2}/{WRIST}"
    assert caught.value.topic == "observation.images.wrist"


def test_rows_and_video_frames_disagree(rig2: Path) -> None:
    path = rig2 / EPISODES
    table = pq.read_table(path)
    column = "videos/observation.images.wrist/to_timestamp"
    values = table[column].to_pylist()
    values[0] -= 0.25
    pq.write_table(
        table.set_column(table.schema.get_field_index(column), column, pa.array(values)), path
    )
    with pytest.raises(InputError, match=r"episode 0: 21 video frames .* 24 data rows") as caught:
        read(rig2, 0)
    assert caught.value.file == f"{rig2}/{WRIST}"
    assert caught.value.topic == "observation.images.wrist"


def test_rows_and_episode_length_disagree(rig2: Path) -> None:
    path = rig2 / EPISODES
    table = pq.read_table(path)
    lengths = table["length"].to_pylist()
    lengths[1] += 1
    pq.write_table(
        table.set_column(table.schema.get_field_index("length"), "length", pa.array(lengths)),
        path,
    )
    with pytest.raises(InputError, match=r"episode 1: 30 data rows, the episodes metadata says 31"):
        read(rig2, 1)


@pytest.fixture(scope="module")
def s3_rig2() -> Iterator[tuple[str, dict[str, Any]]]:
    """rig2 uploaded to moto's S3 server on a loopback port; its URL and storage options."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        options = {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-2"},
        }
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir("lerobot-test")
        fs.put(str(FIXTURES / "rig2"), "lerobot-test/datasets/rig2", recursive=True)
        yield "s3://lerobot-test/datasets/rig2", options
    finally:
        server.stop()


def episode_of(source: LeRobotSource, index: int) -> EpisodeData:
    meta = source.episodes[index]
    return read_episode(source, meta, source.episode_rows(meta), "id", LeRobotOptions())


def test_s3_reads_the_same_episode(s3_rig2: tuple[str, dict[str, Any]]) -> None:
    url, options = s3_rig2
    remote = LeRobotSource(url, **options)
    assert remote.display(remote.episodes[1].data_file).startswith(url + "/data/")
    a, b = episode_of(remote, 1), episode_of(LeRobotSource(str(FIXTURES / "rig2")), 1)
    assert all(
        np.array_equal(x.values, y.values) for x, y in zip(a.vectors, b.vectors, strict=True)
    )
    assert all(
        np.array_equal(x.frames, y.frames) for x, y in zip(a.cameras, b.cameras, strict=True)
    )
    assert a.instruction == b.instruction == "open the drawer"


def stats_flags(root: Path, objects: Path) -> tuple[list[str], dict[str, Any]]:
    source = LeRobotSource(str(root))
    meta = source.episodes[0]
    episode = read_episode(source, meta, source.episode_rows(meta), "id", LeRobotOptions())
    prepared = store_episode(episode, objects, WriteOptions())
    check_stats(prepared.quality, prepared.stats, source, meta)
    return prepared.quality.flag_names, prepared.quality.report["lerobot_stats"]


def test_lerobot_stats_are_checked_against_quarrys(rig2: Path, tmp_path: Path) -> None:
    flags, report = stats_flags(rig2, tmp_path / "objects")
    assert STATS_MISMATCH not in flags and report == {"checked": True, "differences": 0}
    path = rig2 / EPISODES
    table = pq.read_table(path)
    column = "stats/action/mean"
    means = table[column].to_pylist()
    means[0] = [m + 0.01 for m in means[0]]
    pq.write_table(
        table.set_column(table.schema.get_field_index(column), column, pa.array(means)), path
    )
    flags, report = stats_flags(rig2, tmp_path / "again")
    assert STATS_MISMATCH in flags and report == {"checked": True, "differences": 6}
